# Set-up, run and test on a fresh machine with only Python >= 3.11 (see README.md).
VENV ?= .venv
BIN := $(VENV)/bin
PHOTOSEARCH := $(BIN)/photosearch

.PHONY: setup tools run test lint bench loadtest soak clean

setup: $(VENV)/.installed

# torch 2.13.0 + torchvision 0.28.0 first: pinned, so pip takes the CPU build where one is
# offered (the build machines have it) instead of several GB of CUDA packages.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check torch==2.13.0 torchvision==0.28.0
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[embedded,export,dev,demo,loadtest]'
	touch $@

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

test: lint tools
	$(BIN)/pytest

# Every benchmark, one table of their figures (loadtests/benchmarks.py): ~40 min on 2 cores,
# 30 of them the scale benchmark's catalogues of 1e5 and 1e6 photos.
# ARGS="--write docs/benchmarks.md" refreshes the docs page, ARGS="--quick" is a first look.
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
