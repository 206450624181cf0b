# Two commands do all the set-up: `make demo` and `make test` each create/update .venv first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

DOCS_STAMP := $(VENV)/.installed-docs

.PHONY: demo test test-slow lint format bench venv clean docs

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/nlnet demo

# pytest-xdist: one worker per core (each test runs one PyTorch thread). Bytecode is written even
# where PYTHONDONTWRITEBYTECODE is set: the command's subprocesses then load nlnet compiled.
test: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -n auto --dist worksteal

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check nlnet tests benchmarks examples docs/_hooks hubconf.py
	$(VENV)/bin/ruff format --check nlnet tests benchmarks examples docs/_hooks hubconf.py
	$(PY) -m pytest -q tests/engine/test_import_layers.py   # imports flow one way, no cycle

format: $(STAMP)
	$(VENV)/bin/ruff format nlnet tests benchmarks examples docs/_hooks hubconf.py
	$(VENV)/bin/ruff check --fix nlnet tests benchmarks examples docs/_hooks hubconf.py

# The documentation site (MkDocs + Material + mkdocstrings) into site/; --strict: a broken link,
# a missing page or an unresolved reference fails the build. Installs the `docs` extra first.
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[docs]' --config-settings editable_mode=compat
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

bench: $(STAMP)
	$(PY) benchmarks/nonlocal_block.py
	$(PY) benchmarks/train_throughput.py
	$(PY) benchmarks/decode.py

clean:
	rm -rf $(VENV) runs site .pytest_cache .ruff_cache *.egg-info
