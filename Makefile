# The README's two commands: `make demo` and `make test`. Each creates .venv when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# headrace's modules compile once into the venv: the suite starts hundreds of worker, CLI and
# Spark processes, and where the environment sets PYTHONDONTWRITEBYTECODE each would otherwise
# compile every module from source again.
BYTECODE := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BYTECODE) $(VENV)/bin/headrace demo

test: $(STAMP)
	$(BYTECODE) PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -n 2 --dist loadgroup --durations=30

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/vulture

bench: $(STAMP)
	$(PY) bench/core.py

clean:
	rm -rf $(VENV) .pytest_cache
