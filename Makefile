# The two commands a newcomer needs:  make demo  and  make test
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= params/smoke.yaml

.PHONY: setup demo test notebooks clean
setup: $(VENV)/.studykit-installed

$(VENV)/.studykit-installed: pyproject.toml scripts/setup_env.sh
	VENV=$(VENV) bash scripts/setup_env.sh
	touch $@

## demo: run every notebook headless on the CPU smoke parameters -> reports/
demo: setup
	$(PY) -m studykit notebooks --params $(PROFILE)

## test: the whole suite, notebooks included
test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf reports .pytest_cache
