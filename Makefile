# Convenience targets; the quick start itself needs only bash: scripts/demo and scripts/test.
VENV ?= .venv
export VENV

.PHONY: demo test unit lint bench clean

demo:
	scripts/demo

test:
	scripts/test

## unit: the fast tests only (no guest; the test extra compiles libvirt-python, so it needs the
## build packages of scripts/install-system-deps.sh libvirt, as lint does)
unit:
	scripts/bootstrap.sh $(VENV) test
	$(VENV)/bin/python -m pytest -p no:cacheprovider -m "not guest and not libvirt and not go and not prometheus" -n auto --dist loadfile

lint:
	scripts/bootstrap.sh $(VENV) test
	$(VENV)/bin/ruff check kata_mem tests scripts
	$(VENV)/bin/ruff format --check kata_mem tests scripts
	$(VENV)/bin/mypy

bench:
	scripts/bootstrap.sh $(VENV) test
	$(VENV)/bin/python scripts/bench_preview.py

clean:
	rm -rf $(VENV) .cache .mypy_cache .ruff_cache .pytest_cache .hypothesis
