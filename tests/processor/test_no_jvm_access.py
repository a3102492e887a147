"""The processor makes no call into the driver's JVM: it also runs through Spark Connect."""

from __future__ import annotations

import re
from pathlib import Path

import processor

# py4j's handles on the JVM and the objects PySpark keeps of it.
JVM_ACCESS = re.compile(r"\._(jvm|jsc|jdf|jsparkSession|jconf|jsq|jreader|jwrite)\b")
PY4J_IMPORT = re.compile(r"^\s*(from|import)\s+py4j\b", re.MULTILINE)


def _code(path: Path) -> str:
    """The module's code without its comments."""
    return "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())


def test_no_module_of_the_processor_reaches_into_the_jvm() -> None:
    modules = sorted(Path(processor.__file__).parent.glob("*.py"))
    assert len(modules) > 20
    found = [
        f"{path.name}: {match.group(0)}"
        for path in modules
        for pattern in (JVM_ACCESS, PY4J_IMPORT)
        for match in pattern.finditer(_code(path))
    ]
    assert found == []


def test_the_check_finds_what_it_looks_for() -> None:
    code = "jvm = spark._jvm\nrows = df._jdf.count()\nfrom py4j.protocol import Py4JError\n"
    assert [m.group(0) for m in JVM_ACCESS.finditer(code)] == ["._jvm", "._jdf"]
    assert PY4J_IMPORT.search(code) is not None
