# Two commands do all set-up on a fresh machine:
#   make run       -> creates .venv, installs fedpriv, runs the main job
#   make test      -> creates .venv, installs fedpriv, runs the whole test suite on every core (what CI runs)
#   make test-fast -> the tests that are not slow and start no process (no daemons, no Ray, no CLI subprocess)
#   make lint      -> ruff (whole tree) and mypy (fedpriv/, clients/, strategies/, simulations/, less MYPY_EXCLUDE)
#                     as configured in pyproject.toml
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Flower: no telemetry, no update check, no runtime dependency installation.
export FLWR_TELEMETRY_ENABLED := 0
export FLWR_DISABLE_UPDATE_CHECK := 1
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION := 1
export RAY_USAGE_STATS_ENABLED := 0
export RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO := 0

# Folders of the checked packages whose type errors mypy would not report (it still reads them for the
# types the rest uses). Empty: every one is checked; name a folder here only while porting it.
MYPY_EXCLUDE ?=
MYPY_FLAGS := $(if $(strip $(MYPY_EXCLUDE)),--follow-imports=silent $(foreach d,$(MYPY_EXCLUDE),--exclude '^$(d)/'))

.PHONY: run test test-fast lint bench install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, from this machine's local CPU wheel: any other spec downloads a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/fedpriv compare

# pytest-xdist workers, one per core: tests/conftest.py gives each its own FLWR_HOME, temporary directory
# and ports. --dist loadfile runs a module's tests on one worker, so a module-scoped fixture (the
# reproduce entries, the Ray cluster) is made once; the modules go out in collection order, which puts
# the slow tests' modules first. `make test` lists the 25 slowest tests at the end.
PYTEST_WORKERS ?= auto
PYTEST := $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

# pytest exits 5 when it collects no test: a suite that ran nothing must not pass.
define pytest_in_temp_home
	@export FLWR_HOME=$$(mktemp -d); $(PYTEST) $(1); rc=$$?; rm -rf "$$FLWR_HOME"; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing on purpose"; exit 1; fi; exit $$rc
endef

test: $(STAMP)
	$(call pytest_in_temp_home,--durations=25)

test-fast: $(STAMP)
	$(call pytest_in_temp_home,-m "not slow and not subprocess")

lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy $(MYPY_FLAGS)

bench: $(STAMP)
	$(PY) benchmarks/mechanisms_bench.py
	$(PY) benchmarks/hyperspherical_bench.py
	$(PY) benchmarks/engines_bench.py
	$(PY) benchmarks/batched_bench.py
	$(PY) benchmarks/secagg_bench.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
