# The two commands a newcomer needs:  make demo  and  make test
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= params/smoke.yaml

.PHONY: setup demo test test-fast test-data notebooks clean
setup: $(VENV)/.studykit-installed

$(VENV)/.studykit-installed: pyproject.toml scripts/setup_env.sh
	VENV=$(VENV) bash scripts/setup_env.sh
	touch $@

## demo: run every notebook headless on the CPU smoke parameters -> reports/
demo: setup
	$(PY) -m studykit notebooks --params $(PROFILE)

## test: the whole suite (CI runs this): notebooks, several processes, the browser and the committed data included
test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

## test-fast: the unit tests alone (neither slow nor reading committed campaigns): about a minute on 2 cores
test-fast: setup
	$(PY) -m pytest -m "not slow and not data" $(PYTEST_ARGS)

## test-data: the tests that read the committed campaigns under data/ (their tables, READMEs and readings)
test-data: setup
	$(PY) -m pytest -m data $(PYTEST_ARGS)

clean:
	rm -rf reports .pytest_cache
