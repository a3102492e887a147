"""The Kubernetes Indexed Job that sends a fleet from many pods: valid, and what the producer reads.

Kubernetes does not run here: the manifest is checked against the API's own schema
(kubernetes-validate, strict: an unknown field fails), and each pod's flags and
environment, as the Job controller and the kubelet would give them, are read by the
producer's settings.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from string import Template

import kubernetes_validate
import pytest
import yaml

from common.settings import add_settings_arguments, load_settings
from producer.settings import ProducerSettings
from producer.shards import Shard

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "infra" / "kubernetes" / "producer-shards.yaml"
VALUES = {
    "SHARDS": "8", "FLEET_SIZE": "1000000", "RATE": "30000", "DURATION_S": "3600",
    "PRODUCER_IMAGE": "example.azurecr.io/iot-pulse-producer:0.1.0",
    "EVENTHUBS_NAMESPACE": "contoso-iot", "EVENT_HUB": "telemetry",
    "START_AT": "2026-03-01T12:00:00Z",
}  # fmt: skip
KUBERNETES_VERSION = "1.33.0"


def _documents() -> list[dict]:
    text = Template(MANIFEST.read_text()).safe_substitute(VALUES)
    # envsubst fills every ${...}: none may be left for the user to miss.
    body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    assert re.findall(r"\$\{\w+\}", body) == []
    return [d for d in yaml.safe_load_all(text) if d]


def test_every_document_is_valid_for_the_kubernetes_api():
    docs = _documents()
    assert [d["kind"] for d in docs] == ["PersistentVolumeClaim", "Job"]
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_a_field_the_api_lacks_fails_the_check():
    job = _documents()[1]
    job["spec"]["template"]["spec"]["containers"][0]["enviroment"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def _expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion of args and env values."""
    return re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], text)


def test_each_pod_sends_its_own_shard_of_one_fleet(monkeypatch, tmp_path):
    job = _documents()[1]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 8
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    secret = next(e for e in container["env"] if e["name"] == "IOT_KAFKA_CONNECTION_STRING")
    assert secret["valueFrom"]["secretKeyRef"] == {
        "name": "iot-pulse-eventhubs",
        "key": "connection-string",
    }
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    seen = []
    for index in (0, 5, 7):
        for key in list(os.environ):
            if key.startswith("IOT_"):
                monkeypatch.delenv(key)
        env = {"JOB_COMPLETION_INDEX": str(index)}  # what the Job controller sets
        for item in container["env"]:
            value = item.get("value", "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=v")
            env[item["name"]] = _expand(str(value), env)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        parser = argparse.ArgumentParser()
        add_settings_arguments(parser, ProducerSettings)
        args = parser.parse_args([_expand(a, env) for a in container["args"]])
        settings = load_settings(ProducerSettings, args)
        assert settings.fleet_shard() == Shard(index, 8)
        assert settings.manifest_path == Path(f"/data/shards/manifest-{index}.jsonl")
        assert settings.report_path == Path(f"/data/shards/report-{index}.json")
        assert settings.manifest_path.parent.as_posix() in mounts
        assert settings.kafka.bootstrap_servers == "contoso-iot.servicebus.windows.net:9093"
        assert settings.kafka.topic == "telemetry" and settings.kafka.auth == "connection_string"
        assert (settings.fleet_size, settings.rate, settings.workers) == (1_000_000, 30000.0, 2)
        seen.append(settings.start_at.isoformat())
    assert seen == ["2026-03-01T12:00:00+00:00"] * 3
