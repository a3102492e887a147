"""Extract the azurerm provider's schema, for the resources the templates use, from CDKTF.

``terraform validate`` needs the azurerm provider, which only the Terraform registry
serves. Its schema is also published on npm: ``@cdktf/provider-azurerm`` ships, in its
``.jsii`` assembly, every resource's arguments (required or optional), nested blocks and
exported attributes, generated from the provider itself. This module extracts the part
the templates use into ``azurerm-schema.json``, which ``tests/infra/test_templates.py``
lints the templates against (argument names, required arguments, attribute references).

Regenerate (``make tf-schema`` does both steps)::

    npm pack @cdktf/provider-azurerm@14.23.1        # azurerm 4.55.0
    python -m infra.eventhubs.azurerm_schema cdktf-provider-azurerm-14.23.1.tgz
"""

from __future__ import annotations

import argparse
import json
import re
import tarfile
from pathlib import Path
from typing import Any

from common.cli import console

HERE = Path(__file__).resolve().parent
SCHEMA_FILE = HERE / "azurerm-schema.json"
PREFIX = "@cdktf/provider-azurerm."
# Resource and data source types the templates use; the provider block is "provider".
RESOURCES = (
    "azurerm_resource_group",
    "azurerm_eventhub_namespace",
    "azurerm_eventhub",
    "azurerm_eventhub_consumer_group",
    "azurerm_eventhub_namespace_authorization_rule",
    "azurerm_role_assignment",
)
DATA_SOURCES = ("azurerm_client_config",)
_ANCHOR = re.compile(r"\{@link https://registry\.terraform\.io/\S+#(?P<attr>[a-z0-9_]+) ")
# Members of every CDKTF class that are not Terraform attributes.
_NOT_ATTRIBUTES = {"fqn", "friendlyUniqueId", "node", "terraformGeneratorMetadata"}


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _snake(camel: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", camel).lower()


def _module(tf_type: str, *, data: bool) -> str:
    name = tf_type.removeprefix("azurerm_")
    return _camel(("data_azurerm_" if data else "") + name)


def _class(module: str) -> str:
    return module[:1].upper() + module[1:]


def _block(types: dict[str, Any], fqn: str) -> dict[str, Any]:
    """Arguments and nested blocks of a config interface."""
    arguments: dict[str, dict[str, bool]] = {}
    blocks: dict[str, Any] = {}
    for prop in types[fqn].get("properties", []):
        docs = prop.get("docs", {})
        link = docs.get("summary", "") + " " + docs.get("remarks", "")
        match = _ANCHOR.search(link)
        if match is None:
            continue  # cdktf meta-arguments (count, provider ...)
        name = match.group("attr")
        kind = prop["type"]
        nested = kind.get("fqn") or kind.get("union", {}).get("types", [{}])[-1].get(
            "collection", {}
        ).get("elementtype", {}).get("fqn")
        if nested and nested.startswith(PREFIX) and types[nested]["kind"] == "interface":
            blocks[name] = _block(types, nested) | {"required": not prop.get("optional", False)}
        else:
            arguments[name] = {"required": not prop.get("optional", False)}
    return {"arguments": dict(sorted(arguments.items())), "blocks": dict(sorted(blocks.items()))}


def _attributes(types: dict[str, Any], fqn: str) -> list[str]:
    """Attributes a resource exports (arguments included), snake_case."""
    out = set()
    for prop in types[fqn].get("properties", []):
        name = prop["name"]
        if prop.get("static") or name.endswith("Input") or name in _NOT_ATTRIBUTES:
            continue
        out.add(_snake(name))
    return sorted(out)


def extract(assembly: dict[str, Any]) -> dict[str, Any]:
    """The schema subset for ``RESOURCES``, ``DATA_SOURCES`` and the provider block."""
    types = assembly["types"]
    version = re.search(r"provider version (\S+)", assembly.get("readme", {}).get("markdown", ""))

    def entry(tf_type: str, *, data: bool) -> dict[str, Any]:
        module = _module(tf_type, data=data)
        cls = f"{PREFIX}{module}.{_class(module)}"
        return _block(types, f"{cls}Config") | {"attributes": _attributes(types, cls)}

    return {
        "source": f"npm {assembly['name']}@{assembly['version']} (.jsii)",
        "provider_version": version.group(1) if version else "",
        "provider": _block(types, f"{PREFIX}provider.AzurermProviderConfig"),
        "resources": {t: entry(t, data=False) for t in RESOURCES},
        "data": {t: entry(t, data=True) for t in DATA_SOURCES},
    }


def read_assembly(tarball: Path) -> dict[str, Any]:
    """Load ``package/.jsii`` from the npm tarball."""
    with tarfile.open(tarball) as tar:
        member = tar.extractfile("package/.jsii")
        if member is None:
            raise ValueError(f"{tarball} has no package/.jsii")
        schema: dict[str, Any] = json.load(member)
        return schema


def main(argv: list[str] | None = None) -> int:
    """Write ``azurerm-schema.json`` from a ``@cdktf/provider-azurerm`` npm tarball."""
    parser = argparse.ArgumentParser(prog="python -m infra.eventhubs.azurerm_schema")
    parser.add_argument("tarball", type=Path, help="output of npm pack @cdktf/provider-azurerm")
    parser.add_argument("--out", type=Path, default=SCHEMA_FILE)
    args = parser.parse_args(argv)
    schema = extract(read_assembly(args.tarball))
    args.out.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
    console.info("wrote %s (azurerm %s)", args.out, schema["provider_version"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
