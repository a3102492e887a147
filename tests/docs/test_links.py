"""Every relative link of the Markdown files points at a file of the repository.

The site's strict build checks the links between its pages; these are also read on the
repository's web view, where a link resolves against the file's own folder and must
name a file that is committed: one that exists and that git does not ignore (a new
file counts before its commit). Anchors are left to the build.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]
PROJECT_FILES = ("README.md", "CONTRIBUTING.md", "SECURITY.md", "CHANGELOG.md")

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
# [text](target "title"), ![alt](target), [label]: target, and HTML's href= / src=.
_INLINE = re.compile(
    r"!?\[[^\]\n]*\]\(\s*(?:<([^<>\n]+)>|([^()\s<>]+))(?:\s+[\"'][^\"']*[\"'])?\s*\)"
)
_DEFINITION = re.compile(r"^ {0,3}\[(?!\^)[^\]\n]+\]:\s*(?:<([^<>\n]+)>|(\S+))", re.M)
_HTML = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files() -> list[Path]:
    """The files checked: the project's own at the root, and every page under docs/."""
    return [ROOT / name for name in PROJECT_FILES] + sorted((ROOT / "docs").rglob("*.md"))


def relative_links(text: str) -> list[str]:
    """The relative link targets of a Markdown text, outside code, without their anchor."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    targets = [
        next(g for g in m.groups() if g is not None)
        for pattern in (_INLINE, _DEFINITION, _HTML)
        for m in pattern.finditer(text)
    ]
    return [
        unquote(t.split("#", 1)[0].split("?", 1)[0])
        for t in targets
        if not _SCHEME.match(t) and not t.startswith(("#", "//"))
    ]


def repository_files() -> set[Path]:
    """The files git keeps (tracked, or new and not ignored), and their folders."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    files = {ROOT / name for name in listed.split("\0") if name}
    return files | {parent for f in files for parent in f.parents}


def test_the_link_finder_finds_each_kind_of_link_and_skips_code():
    text = (
        "See [a](a.md#x), ![img](assets/p.png 'title'), [b](<b c.md>), [web](https://x.y/z),\n"
        "[top](#top), `[code](code.md)` and [d%20e](d%20e.md?plain=1).\n"
        '<img src="shot.png"> [ref]: ../ref.md\n\n[label]: defs.md\n\n'
        "```bash\n[fenced](fenced.md)\n```\n"
    )
    assert relative_links(text) == [
        "a.md", "assets/p.png", "b c.md", "d e.md", "defs.md", "shot.png",
    ]  # fmt: skip


def test_every_relative_link_points_at_a_file_of_the_repository():
    kept = repository_files()
    assert [p for p in markdown_files() if p not in kept] == []
    broken = {}
    for page in markdown_files():
        for target in relative_links(page.read_text(encoding="utf-8")):
            path = (page.parent / target).resolve() if target else page
            if path not in kept:
                broken.setdefault(str(page.relative_to(ROOT)), []).append(target)
    assert broken == {}
