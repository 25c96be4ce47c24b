# The two quick-start commands: `make demo` and `make test`. Both install what they need.
VENV   ?= .venv
PYTHON ?= python3
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: compiled demo test lint dev bench

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch is installed first and pinned: an unpinned resolve pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# Every `cortex` command imports the package afresh. Where bytecode is not written on import
# (PYTHONDONTWRITEBYTECODE, as on CI), each would compile it again: ~0.2-0.4 CPU-s a command.
compiled: $(STAMP)
	$(PY) -m compileall -q cortex_pipelines

demo: compiled
	$(VENV)/bin/cortex run --demo

# Two workers: many tests wait on real processes (sensor ticks, dagster dev start-up, schedules),
# so a second worker fills those waits. TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2

test: compiled
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=25

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/dg check defs

bench: $(STAMP)
	$(PY) -m bench.locomo --split check
	$(PY) -m bench.paraphrase --split check
	$(PY) -m bench.paraphrase --updates --split check
	$(PY) -m bench.context_recall --split check
	$(PY) -m bench.caching --json bench/results/caching.json
	$(PY) -m bench.perf --json bench/results/perf.json

dev: compiled
	$(VENV)/bin/cortex dev
