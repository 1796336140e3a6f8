"""Record what a block of code sends over ``torch.distributed``: collectives and messages.

On a GPU cluster two mistakes hang or crash a job that runs fine on CPU with
gloo: a CPU tensor in an NCCL collective, and point-to-point messages that a
pair of ranks posts in different orders (NCCL matches them by order, not by
tag). :class:`CommLog` records both on any backend::

    with CommLog() as log:
        pmodel(x).sum().backward()
    log.collectives   # every collective: its name and the devices of its tensors
    log.batches       # every batch_isend_irecv call, its operations in posted order
    log.unbatched     # isend/irecv/send/recv posted outside a batch

:func:`unmatched` takes the logs of every rank (gathered after the fact, e.g.
returned by :func:`sciml.distributed.spawn`) and lists each message without its
counterpart at the same position on the peer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from sciml.spatial_parallel.split.tensor import tensors_in

#: The collectives a log records (those the package calls).
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_object", "broadcast", "barrier")
#: Point-to-point functions, recorded as unbatched when called outside a batch.
POINT_TO_POINT = ("isend", "irecv", "send", "recv")


@dataclass(frozen=True)
class Message:
    """One point-to-point operation (``kind``: ``"send"`` or ``"recv"``; ``peer``: global rank)."""

    kind: str
    peer: int
    tag: int
    shape: tuple[int, ...]
    dtype: str
    device: str


@dataclass(frozen=True)
class Collective:
    """One collective call and the devices of the tensors it was given."""

    name: str
    devices: tuple[str, ...]


def _message(kind: str, tensor: torch.Tensor, peer: int, tag: int) -> Message:
    return Message(kind, peer, tag, tuple(tensor.shape), str(tensor.dtype), str(tensor.device))


@dataclass
class CommLog:
    """Context manager: records every collective and point-to-point message of this process.

    Patches the ``torch.distributed`` functions while active (all threads, so
    the autograd engine's backward threads are seen too) and restores them on
    exit. The log itself holds no tensors and can be pickled.

    Attributes:
        collectives: The collectives, in call order.
        batches: The operations of each ``batch_isend_irecv`` call, in posted order.
        unbatched: Point-to-point operations posted outside a batch.
    """

    collectives: list[Collective] = field(default_factory=list)
    batches: list[list[Message]] = field(default_factory=list)
    unbatched: list[Message] = field(default_factory=list)

    def __post_init__(self) -> None:
        """Nothing patched yet."""
        self._saved: dict[str, Callable[..., Any]] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        """The records only (no functions, no lock)."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore the records."""
        self.__dict__.update(state)
        self.__post_init__()

    def _collective(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            devices = tuple(str(t.device) for t in tensors_in([*args, *kwargs.values()]))
            with self._lock:
                self.collectives.append(Collective(name, devices))
            return original(*args, **kwargs)

        return wrapper

    def _point(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        kind = "send" if name in ("isend", "send") else "recv"

        def wrapper(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            peer = kwargs.get("dst", kwargs.get("src", args[0] if args else -1))
            if not getattr(self._local, "batching", False):
                tag = kwargs.get("tag", 0)
                message = _message(kind, tensor, -1 if peer is None else peer, tag)
                with self._lock:
                    self.unbatched.append(message)
            return original(tensor, *args, **kwargs)

        return wrapper

    def _batch(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(ops: list[dist.P2POp]) -> Any:
            batch = []
            for op in ops:
                send = op.op in (dist.isend, self._saved["isend"])
                batch.append(_message("send" if send else "recv", op.tensor, op.peer, op.tag))
            with self._lock:
                self.batches.append(batch)
            self._local.batching = True  # the batch calls isend/irecv itself
            try:
                return original(ops)
            finally:
                self._local.batching = False

        return wrapper

    def __enter__(self) -> CommLog:
        """Start recording."""
        if self._saved:
            raise RuntimeError("CommLog is already recording")
        for name in (*COLLECTIVES, *POINT_TO_POINT, "batch_isend_irecv"):
            self._saved[name] = getattr(dist, name)
        for name in COLLECTIVES:
            setattr(dist, name, self._collective(name, self._saved[name]))
        for name in POINT_TO_POINT:
            # both modules: P2POp accepts only the functions distributed_c10d holds
            wrapper = self._point(name, self._saved[name])
            setattr(dist, name, wrapper)
            setattr(c10d, name, wrapper)
        dist.batch_isend_irecv = self._batch(self._saved["batch_isend_irecv"])
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop recording and restore ``torch.distributed``."""
        for name, function in self._saved.items():
            setattr(dist, name, function)
            if name in POINT_TO_POINT:
                setattr(c10d, name, function)
        self._saved = {}

    def devices(self) -> set[str]:
        """The devices of every tensor given to a collective."""
        return {device for call in self.collectives for device in call.devices}


def unmatched(logs: Sequence[CommLog]) -> list[str]:
    """Every message of the ranks' ``logs`` (index = global rank) without its counterpart.

    For each ordered pair of ranks, the ``k``-th send from ``a`` to ``b`` (over all
    of ``a``'s batches, in posted order) must meet the ``k``-th receive from ``a``
    on ``b`` with the same tag, shape and dtype. Unbatched operations are
    reported too.

    Returns:
        One line per problem; empty when every message is matched.
    """
    problems = [
        f"rank {rank}: {len(log.unbatched)} operations outside batch_isend_irecv, first "
        f"{log.unbatched[0]}"
        for rank, log in enumerate(logs)
        if log.unbatched
    ]
    streams: dict[tuple[str, int, int], list[Message]] = {}
    for rank, log in enumerate(logs):
        for batch in log.batches:
            for message in batch:
                pair = (rank, message.peer) if message.kind == "send" else (message.peer, rank)
                streams.setdefault((message.kind, *pair), []).append(message)
    pairs = {key[1:] for key in streams}
    for source, target in sorted(pairs):
        sends = streams.get(("send", source, target), [])
        recvs = streams.get(("recv", source, target), [])
        for position in range(max(len(sends), len(recvs))):
            send = sends[position] if position < len(sends) else None
            recv = recvs[position] if position < len(recvs) else None
            if send is None or recv is None or _key(send) != _key(recv):
                problems.append(
                    f"message {position} from rank {source} to rank {target}: sent {send}, "
                    f"received as {recv}"
                )
    return problems


def _key(message: Message) -> tuple[int, tuple[int, ...], str]:
    return (message.tag, message.shape, message.dtype)
