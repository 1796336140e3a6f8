#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying and testing the batch
# scripts without a real cluster (no systemd needed; run as root).
#
#   slurm/local-cluster.sh start DIR   # config, state and logs under DIR
#   export SLURM_CONF=DIR/slurm.conf   # then sbatch/srun/squeue use it
#   slurm/local-cluster.sh stop DIR
#
# Needs Debian's slurmctld, slurmd, slurm-client and munge.
set -euo pipefail
action=${1:?usage: local-cluster.sh start|stop DIR}
dir=$(realpath -m "${2:?usage: local-cluster.sh start|stop DIR}")
cpus=${SLURM_LOCAL_CPUS:-4}
# the memory a job may ask for (--mem; Dask's SLURMCluster always does): this machine's, in MiB
memory=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)

stop() {
    for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid; do
        [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    rm -f "$dir"/slurmd.pid "$dir"/slurmctld.pid
}

if [ "$action" = stop ]; then stop; exit 0; fi
[ "$action" = start ] || { echo "unknown action $action (start|stop)" >&2; exit 2; }
for tool in slurmctld slurmd sbatch munged; do
    command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install slurmctld slurmd slurm-client munge" >&2; exit 1; }
done

mkdir -p "$dir"/state "$dir"/spool "$dir"/log
host=$(hostname -s)
port=$((6800 + RANDOM % 1000))
cat > "$dir"/slurm.conf <<CONF
ClusterName=sciml-local
# job ids of their own: a job's rendezvous port follows its id (sciml.distributed.launch),
# so two clusters on this machine that both started at job 1 collided on one port
FirstJobId=$(( (port - 6800) * 20 + 1 ))
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1000))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
MpiDefault=none
SchedulerType=sched/backfill
KillWait=5
MinJobAge=300
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF

if ! pgrep -x munged >/dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
    [ -f /etc/munge/munge.key ] || mungekey --create
    runuser -u munge -- munged 2>/dev/null || munged --force
fi
export SLURM_CONF=$dir/slurm.conf
stop
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 60); do
    if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
        echo "local Slurm up: export SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    sleep 0.5
done
echo "local Slurm did not come up; logs in $dir/log" >&2
sinfo >&2 || true
exit 1
