"""Rules the code keeps that no linter checks: one way to talk, reasons for type: ignore."""

from __future__ import annotations

import ast
import io
import tokenize

from tests.test_import_graph import ROOT, project_modules


def test_the_packages_talk_on_stderr_only_through_the_console_logger():
    """No ``print(..., file=sys.stderr)`` or ``sys.stderr.write`` outside ``common.cli``."""
    found = []
    for name, path in project_modules().items():
        if name == "common.cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = ast.unparse(node.func)
            to_stderr = func == "print" and any(
                k.arg == "file" and ast.unparse(k.value) == "sys.stderr" for k in node.keywords
            )
            if to_stderr or func == "sys.stderr.write":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_every_type_ignore_names_its_code_and_says_why():
    """``# type: ignore[code]  # why``: what the checker is told to let pass, and why."""
    found = []
    for path in project_modules().values():
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        for token in tokens:
            if token.type != tokenize.COMMENT or "type: ignore" not in token.string:
                continue
            head, _, why = token.string.partition("]")
            if (
                not head.startswith("# type: ignore[")
                or not why.startswith("  # ")
                or len(why) < 12
            ):
                found.append(f"{path.relative_to(ROOT)}:{token.start[0]}: {token.string}")
    assert found == []
