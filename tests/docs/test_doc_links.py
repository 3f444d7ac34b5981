"""Every relative link in the project's Markdown resolves: README.md, docs/*.md and every other .md
in the tree (the deploy guide, the chart's README, the fixtures' notes).

A link `[text](path#anchor)`, an image, or a reference definition `[label]: path` must name a file
or folder inside the repository, and an `#anchor` into a .md file must be the GitHub slug of one
of its headings. A full reference `[text][label]` must have its definition. Links in fenced code
blocks and in code spans are text, not links, and are not checked. Absolute URLs (https, mailto)
are left alone: they name public pages, not this tree."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[2]
# Folders that are not the project's documents: tools' and builds' output, virtual environments.
SKIP_DIRS = {"build", "dist", "out", "node_modules", "__pycache__"}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:.|\n)*?(?<!`)\1(?!`)")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
# [text](dest "title") and ![alt](dest); the text may hold one level of brackets.
INLINE = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
DEFINITION = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(<[^>]*>|\S+)", re.M)
FULL_REFERENCE = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\[([^\]]+)\]")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def markdown_files(root: Path = REPO) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info"))
        found += [Path(folder) / f for f in sorted(files) if f.endswith(".md")]
    return found


def prose(text: str, spans: bool = True) -> str:
    """The text with fenced code blocks blanked (line count kept) and, with `spans`, code spans and
    HTML comments removed: what is left is where a link can be."""
    lines, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            lines.append("")
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):].strip():
                fence = None
            lines.append("")
        else:
            lines.append(line)
    if not spans:
        return "\n".join(lines)
    text = HTML_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), "\n".join(lines))
    return CODE_SPAN.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text as rendered (code spans and links to their text,
    `*` emphasis gone), lower case, without punctuation but `-` and `_`, spaces as `-`."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: Counter[str] = Counter()
    out = set()
    for line in prose(path.read_text(encoding="utf-8"), spans=False).splitlines():
        if m := ATX_HEADING.match(line):
            base = slug(m.group(2))
            out.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return out


def links(text: str) -> list[tuple[int, str]]:
    """(line, destination) of every inline link, image and reference definition; a full
    reference without its definition is returned as `[label]` (it cannot resolve)."""
    body = prose(text)
    line_of = lambda pos: body.count("\n", 0, pos) + 1  # noqa: E731
    found = [(m.start(), m.group(2).strip("<>")) for m in INLINE.finditer(body)]
    defined = set()
    for m in DEFINITION.finditer(body):
        defined.add(m.group(1).strip().lower())
        found.append((m.start(), m.group(2).strip("<>")))
    for m in FULL_REFERENCE.finditer(body):
        if m.group(2).strip().lower() not in defined:
            found.append((m.start(), f"[{m.group(2)}]"))
    return [(line_of(pos), dest) for pos, dest in sorted(found)]


def broken(path: Path, root: Path = REPO) -> list[str]:
    """What is wrong with each relative link of one file, as `file:line: dest: why`."""
    problems = []
    where = path.relative_to(root)
    for line, dest in links(path.read_text(encoding="utf-8")):
        def bad(why: str) -> None:
            problems.append(f"{where}:{line}: {dest}: {why}")

        if dest.startswith("[") and dest.endswith("]"):
            bad("a reference link with no definition")
            continue
        if SCHEME.match(dest):
            if not dest.startswith(("https://", "http://", "mailto:")):
                bad("a link with a scheme that names no public page")
            continue
        target_part, _, anchor = dest.partition("#")
        target_part = unquote(target_part.split("?")[0])
        if target_part.startswith("/"):  # GitHub reads a leading / as the repository's root
            target = Path(os.path.normpath(root / target_part.lstrip("/")))
        elif target_part:
            target = Path(os.path.normpath(path.parent / target_part))
        else:
            target = path
        if target != root and root not in target.parents:
            bad("points outside the repository")
            continue
        if not target.exists():
            bad(f"no such file: {target.relative_to(root)}")
            continue
        if anchor and target.suffix == ".md" and target.is_file() and unquote(anchor) not in anchors(target):
            bad(f"no heading in {target.relative_to(root)} has the anchor #{anchor}")
    return problems


FILES = markdown_files()


def test_the_documents_are_found():
    names = {p.relative_to(REPO).as_posix() for p in FILES}
    assert "README.md" in names
    assert {p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")} <= names
    assert {"charts/gpupair/README.md", "deploy/README.md", "tests/fixtures/topo/SOURCES.md"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(path):
    assert broken(path) == []


def test_the_readme_links_every_docs_page():
    """The README is the front door: every page under docs/ is named there."""
    readme = {dest.split("#")[0] for _, dest in links((REPO / "README.md").read_text(encoding="utf-8"))}
    pages = {p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")}
    assert pages - readme == set()


# ---- the checker itself: each kind of break is caught, and what is not a link is left alone


def check(tmp_path: Path, text: str, **files: str) -> list[str]:
    (tmp_path / "docs").mkdir()
    for name, content in files.items():
        (tmp_path / name.replace("__", "/")).write_text(content, encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    page.write_text(text, encoding="utf-8")
    return [p.split(": ", 1)[1] for p in broken(page, root=tmp_path)]


def test_a_missing_file_an_escape_and_a_bad_anchor_are_caught(tmp_path):
    text = (
        "# Page\n\nSee [there](../other.md#a-heading), [gone](../gone.md), [out](../../outside/DIGEST.md),\n"
        "[bad anchor](../other.md#no-such-heading), [self](#page), [self bad](#nope) and\n"
        "[ref][r] and [undefined][missing].\n\n[r]: ../gone-too.md\n"
    )
    assert check(tmp_path, text, **{"other.md": "# Other\n\n## A heading\n"}) == [
        "../gone.md: no such file: gone.md",
        "../../outside/DIGEST.md: points outside the repository",
        "../other.md#no-such-heading: no heading in other.md has the anchor #no-such-heading",
        "#nope: no heading in docs/page.md has the anchor #nope",
        "[missing]: a reference link with no definition",
        "../gone-too.md: no such file: gone-too.md",
    ]


def test_code_is_not_checked_and_public_urls_are_left_alone(tmp_path):
    text = (
        "# Page\n\n```md\n[in a block](../nowhere.md)\n```\n\n~~~\n[tilde](nowhere.md)\n~~~\n\n"
        "A span: `[x](../nowhere.md)`. Public: [k8s](https://kubernetes.io/docs/). "
        "A folder: [deploy](../deploy). A root link: [readme](/README.md).\n"
    )
    (tmp_path / "deploy").mkdir()
    assert check(tmp_path, text, **{"README.md": "# r\n"}) == []


def test_github_slugs():
    assert slug("The DRA path: `--path dra`") == "the-dra-path---path-dra"
    assert slug("Priorities and preemption: `--high-priority-share`, `--intent-mix`") == (
        "priorities-and-preemption---high-priority-share---intent-mix")
    assert slug("Freshness and the API load per node") == "freshness-and-the-api-load-per-node"
    assert slug("`gpupair_extender_plan_follow_ratio` and [links](x.md)") == "gpupair_extender_plan_follow_ratio-and-links"


def test_repeated_headings_are_numbered(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# A\n## Flags\n### Flags\n```\n# Flags\n```\n", encoding="utf-8")
    assert anchors(page) == {"a", "flags", "flags-1"}
