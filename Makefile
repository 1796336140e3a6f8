# The README's commands. Each one sets up .venv from nothing when needed.
#   make demo    end-to-end run on the bundled data -> runs/demo/report.md
#   make test    the test suite, in about 10 minutes on 2 cores
#   make system-test   the product end to end: README blocks as pasted, notebooks in quick
#                mode (in a fresh venv of the notebooks extra, and in the docs build), the
#                docs site in a browser, the demo's sections, real Slurm jobs, the GPU
#                check's dry run, benchmark quick runs; and the tests marked slow (costlier
#                cases of code that make test runs in quicker ones: compiled U-Nets, peaks)
#   make notebooks   each notebook run quick in .venv, then as shipped (a user's sizes)
#   make docs    the documentation site -> docs/_build/html (notebooks executed quick, the API
#                reference, the demo's report); warnings fail it; prints its time
#   make bench   benchmarks/*.py but the _helpers (tables on stdout, JSON under runs/bench/)
#   make lab     JupyterLab on notebooks/
#   make gpu-check OUT=DIR   benchmarks/gpu_check.py on one GPU (no .venv needed) -> DIR/gpu_check.{json,md}
#   make gpu-wheels          the zarr and dask wheels the GPU machine lacks -> gpu_wheels/ (carry it)
# On a GPU machine drop the CPU pin: `make CONSTRAINTS= test`.

PYTHON ?= python3
VENV ?= .venv
CONSTRAINTS ?= constraints.txt
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --progress-bar off $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
# `make demo` needs only the package; the tests and benchmarks add `dev` and `tensorboard`,
# the notebook runs and JupyterLab `notebooks` too. Each stamp is one pip call.
RUNTIME := $(VENV)/.sciml-runtime
STAMP := $(VENV)/.sciml-installed
NOTEBOOK_STAMP := $(VENV)/.sciml-notebooks
DOCS_STAMP := $(VENV)/.sciml-docs
PYTEST_WORKERS ?= 2

.PHONY: demo test system-test notebooks docs bench lab lint install clean gpu-check gpu-wheels

$(BIN)/python:
	@echo "== setting up $(VENV) with $(PYTHON) and the newest pip (seconds)"
	$(PYTHON) -m venv $(VENV)
	$@ -m pip install --progress-bar off --upgrade pip

$(RUNTIME): pyproject.toml constraints.txt | $(BIN)/python
	@echo "== installing sciml and its runtime dependencies (torch, xarray, dask, geopandas ...)"
	@echo "   into $(VENV): a few minutes, once; pip lists each package as it goes"
	$(PIP) -e .
	touch $@

$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	@echo "== installing sciml with the test and TensorBoard extras into $(VENV) (a few minutes, once)"
	$(PIP) -e ".[dev,tensorboard]"
	touch $@ $(RUNTIME)

$(NOTEBOOK_STAMP): $(STAMP)
	@echo "== adding JupyterLab and the notebook kernel to $(VENV) (a minute, once)"
	$(PIP) -e ".[dev,notebooks,tensorboard]"
	touch $@

install: $(STAMP)

demo: $(RUNTIME)
	$(BIN)/sciml demo

test: $(STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 \
		-m "not shipped and not notebook and not system and not slow" tests

system-test: $(DOCS_STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 \
		-m "(system or slow) and not shipped" tests

notebooks: $(NOTEBOOK_STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) -m "notebook or shipped" tests/test_notebooks.py

# Sphinx with MyST-NB (docs/conf.py), and Playwright for the site's browser test
# (tests/test_docs_site.py, in make system-test). The build is incremental: delete
# docs/_build to run the notebooks (and, without runs/demo/report.md, the quick demo) again.
$(DOCS_STAMP): $(NOTEBOOK_STAMP)
	@echo "== adding Sphinx, MyST-NB and Playwright to $(VENV) (a minute, once)"
	$(PIP) -e ".[dev,notebooks,tensorboard,docs]"
	touch $@

docs: $(DOCS_STAMP)
	@start=$$(date +%s); \
	$(BIN)/python -m sphinx -b html -W --keep-going docs docs/_build/html || exit 1; \
	echo "== docs/_build/html/index.html: built in $$(( $$(date +%s) - start )) s"

# Benchmarks that read the evaluation preset (written once) or the runs of another one.
PRESET := runs/bench/qg-imperfect-v1.nc
WEATHER_RUNS := runs/bench/weather_postprocess_runs
ON_PRESET := weather_postprocess weather_extremes weather_spread
# Benchmarks with a target of their own.
NOT_IN_BENCH := gpu_check

bench: $(STAMP) $(PRESET)
	@for script in benchmarks/[!_]*.py; do \
		case " $(ON_PRESET) $(NOT_IN_BENCH) " in *" $$(basename $$script .py) "*) continue;; esac; \
		echo "== $$script"; $(BIN)/python $$script || exit 1; \
	done
	$(BIN)/python benchmarks/weather_postprocess.py $(PRESET) --seeds 0 1 2 --work $(WEATHER_RUNS)
	$(BIN)/python benchmarks/weather_extremes.py $(PRESET) $(WEATHER_RUNS)/*_seed0
	$(BIN)/python benchmarks/weather_spread.py $(PRESET) --work runs/bench/weather_spread_runs \
		--out runs/bench/weather_spread.json

$(PRESET): $(STAMP)
	$(BIN)/sciml weather preset qg-imperfect-v1 --out $@ --quiet

# A GPU machine may hold the repository and its Python alone: the venv's Python when there is one,
# else $(PYTHON), with the working tree on PYTHONPATH. GPU_CHECK_ARGS: e.g. --dry-run, --only NAME.
GPU_CHECK_PYTHON := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))

gpu-check:
	@test -n "$(OUT)" || { echo "make gpu-check needs OUT=DIR (where gpu_check.json and gpu_check.md go)"; exit 2; }
	PYTHONPATH=.$(if $(PYTHONPATH),:$(PYTHONPATH)) $(GPU_CHECK_PYTHON) benchmarks/gpu_check.py $(OUT) $(GPU_CHECK_ARGS)

gpu-wheels: $(STAMP)
	$(BIN)/python tools/gpu_wheels.py --dest gpu_wheels

# JupyterLab refuses to start as root without --allow-root (a container's root, say).
lab: $(NOTEBOOK_STAMP)
	$(BIN)/jupyter lab notebooks/$(if $(filter 0,$(shell id -u)), --allow-root)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) runs .pytest_cache
