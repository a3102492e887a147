# Common commands. `make demo` and `make test` set up everything they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_ARGS ?=
PYTEST_ARGS ?=

.PHONY: setup jars demo test lint broker-start broker-stop bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "Java 17+ is required: apt-get install openjdk-17-jdk-headless"; exit 1; }
	@command -v mvn >/dev/null || { echo "Maven is required: apt-get install maven"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PY) -m pip install --quiet -e ".[producer,processor,dashboard,infra]" --group dev
	touch $(STAMP)

jars: setup
	$(PY) -m infra.jars spark kafka

demo: jars
	$(PY) -m infra.demo $(DEMO_ARGS)

test: jars
	$(PY) -m pytest $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

broker-start: jars
	$(PY) -m infra.broker start

broker-stop: setup
	$(PY) -m infra.broker stop

clean:
	-$(PY) -m infra.broker stop
	rm -rf .local artifacts
