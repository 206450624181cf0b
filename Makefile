# Two commands do all the set-up: `make demo` and `make test` each create/update .venv first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-slow lint format bench venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/nlnet demo

test: $(STAMP)
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check nlnet tests benchmarks examples
	$(VENV)/bin/ruff format --check nlnet tests benchmarks examples
	$(PY) -m pytest -q tests/engine/test_import_layers.py   # imports flow one way, no cycle

format: $(STAMP)
	$(VENV)/bin/ruff format nlnet tests benchmarks examples
	$(VENV)/bin/ruff check --fix nlnet tests benchmarks examples

bench: $(STAMP)
	$(PY) benchmarks/nonlocal_block.py
	$(PY) benchmarks/train_throughput.py
	$(PY) benchmarks/decode.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache *.egg-info
