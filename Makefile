# Set-up, run and test on a fresh machine with only Python >= 3.11 (see README.md).
VENV ?= .venv
BIN := $(VENV)/bin
PHOTOSEARCH := $(BIN)/photosearch
UV := $(BIN)/uv

.PHONY: setup lock tools run test lint docs bench loadtest soak clean

# What `make setup` installs: the lock of pyproject.toml's extras cpu, embedded, export, dev,
# demo and loadtest (requirements/dev.txt, written by `make lock`). On a GPU host,
# LOCK=requirements/dev-gpu.txt takes the extra gpu (onnxruntime-gpu) instead of cpu.
LOCK ?= requirements/dev.txt

# uv does not read pip's configuration. It takes the machine's certificate store, as pip does,
# and torch's CPU build from where pip finds it: the directories pip finds links in (the build
# machines keep that wheel there), else PyTorch's page of torch wheels.
export UV_SYSTEM_CERTS := 1
PIP_LINKS = $(or $(PIP_FIND_LINKS),$(shell python3 -m pip config get global.find-links 2>/dev/null))
TORCH_WHEELS = $(addprefix --find-links ,$(or $(PIP_LINKS),https://download.pytorch.org/whl/torch/))

setup: $(VENV)/.installed

# A virtual environment set up from another lock is set up again.
ifneq ($(shell cat $(VENV)/.installed 2>/dev/null),$(LOCK))
.PHONY: $(VENV)/.installed
endif

# Exactly the lock's packages, each checked against its hash (a package the lock lacks is
# removed), then the project itself, editable, with nothing resolved; then a check that every
# installed package has what it requires. (No bytecode compiled ahead: Python writes it for
# the modules imported, a fraction of the 2 minutes it takes to compile all on 2 cores.)
$(VENV)/.installed: $(LOCK) pyproject.toml $(UV)
	$(UV) pip sync --quiet --python $(BIN)/python --require-hashes $(TORCH_WHEELS) $(LOCK)
	$(UV) pip install --quiet --python $(BIN)/python --no-deps --no-build-isolation -e .
	$(UV) pip check --quiet --python $(BIN)/python
	echo $(LOCK) > $@

# uv, the one tool installed before the lock, is pinned and hash-checked too.
$(UV): requirements/uv.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements/uv.txt
	touch $@

# Writes the locks of requirements/ from pyproject.toml and requirements/*.in: exact versions
# and their hashes, for CPython 3.11 on x86-64 Linux (CI, the app and export images) and for
# the Python 3.10 of the Triton images (CPU and GPU). A version already locked stays while it
# fits: ARGS=--upgrade takes the newest of everything, ARGS="--upgrade-package NAME" of one.
COMPILE = $(UV) pip compile --quiet --generate-hashes --no-build --no-python-downloads \
	--custom-compile-command "make lock" $(TORCH_WHEELS) $(ARGS)
LOCKED = $(COMPILE) -c requirements/constraints.in --override requirements/overrides.in
PY311 := --python-version 3.11 --python-platform x86_64-manylinux_2_35
EXTRAS := $(addprefix --extra ,embedded export dev demo loadtest)

lock: $(UV)
	$(COMPILE) requirements/uv.in -o requirements/uv.txt
	$(LOCKED) $(PY311) pyproject.toml requirements/dev.in --extra cpu $(EXTRAS) \
	  -o requirements/dev.txt
	$(LOCKED) $(PY311) -c requirements/dev.txt pyproject.toml requirements/dev.in --extra gpu \
	  $(EXTRAS) -o requirements/dev-gpu.txt
	$(LOCKED) $(PY311) -c requirements/dev.txt pyproject.toml -o requirements/app.txt
	$(LOCKED) $(PY311) -c requirements/dev.txt pyproject.toml --extra export --extra cpu \
	  -o requirements/export.txt
	$(LOCKED) --python-version 3.10 --python-platform x86_64-manylinux_2_35 \
	  -c requirements/dev.txt requirements/triton-cpu.in -o requirements/triton-cpu.txt
	$(LOCKED) --python-version 3.10 --python-platform x86_64-manylinux_2_35 \
	  -c requirements/dev-gpu.txt requirements/triton-gpu.in -o requirements/triton-gpu.txt

# The whole system on this machine (Redis, Triton, the API and page, the indexer, beat) until
# Ctrl-C: exports the model and indexes the demo photos on the first start. ARGS="--photos DIR".
run: setup
	$(PHOTOSEARCH) up $(ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Tools the tests run that PyPI does not carry, from the Debian registry when the machine lacks
# them: Chromium for the search page (driven by Playwright; never `playwright install`, which
# downloads), and promtool (package prometheus) for the alert rules.
DEBIAN_TOOLS := /usr/bin/chromium:chromium /usr/bin/promtool:prometheus

tools:
	@missing=""; for t in $(DEBIAN_TOOLS); do \
	  test -x "$${t%%:*}" || missing="$$missing $${t#*:}"; done; \
	test -z "$$missing" || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $$SUDO apt-get install -y -qq --no-install-recommends $$missing \
	  || { $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends $$missing; }; }

# Two workers, each test module whole on one (its module fixtures start once): most system
# tests wait on the processes they start, so two modules share the machine's cores well.
PYTEST_WORKERS ?= 2

# mypy runs beside the suite: it is two minutes of one core, most of them while the suite's
# workers wait on the servers they start. Its report follows the suite's; either failing fails.
test: setup tools
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	# The tiny trained model the quality tests share, from the cache; a machine's first run
	# trains it here (about 13 minutes on 2 cores), not inside a test's 600-second limit.
	$(PHOTOSEARCH) model train-tiny
	@types=$$(mktemp); $(BIN)/mypy > "$$types" 2>&1 & mypy=$$!; \
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile; suite=$$?; \
	wait $$mypy; checked=$$?; echo "$(BIN)/mypy"; cat "$$types"; rm -f "$$types"; \
	test $$suite = 0 && test $$checked = 0

# The documentation site (mkdocs.yml, docs/) in strict mode: a broken link or anchor fails it.
# Into site/, ignored by git; `$(BIN)/mkdocs serve` shows it while you write.
# (Material warns on every build that MkDocs 2 will not run it; the lock holds MkDocs 1.6.)
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Every benchmark of loadtests/registry.py, one table of their figures: hours on 2 cores, most
# of them the scale and reindex benchmarks' catalogues of 1e5 and 1e6 photos.
# ARGS="--write docs/benchmarks.md" refreshes the docs page (ARGS="--only api --write ..." its
# api rows, the others kept with their runs); ARGS="--quick" is a first look.
bench: setup
	$(BIN)/python -m loadtests.benchmarks $(ARGS)

# A load test with its report (loadtests/README.md), on a `photosearch up` started for it:
# a few minutes. ARGS="--scenario peak", ARGS="--rate 50 --duration 60".
loadtest: setup
	$(BIN)/python -m loadtests.run --start $(ARGS)

# The soak test (loadtests/soak.py, not run in CI): 30 min at 50/s mixed with a sync every
# 5 min on a `photosearch up` started for it; a report with per-minute latency, errors, memory
# per process and a verdict per criterion. ARGS="--duration 600" for a shorter one.
soak: setup
	$(BIN)/python -m loadtests.soak --start $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
