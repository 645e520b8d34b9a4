"""The documentation: the site builds with MkDocs --strict (no broken link, anchor or nav entry),
the README and the Markdown in the repository link only to files and headings that exist, the
config reference is the one the code generates, and every config key is in it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from agentgym.configdoc import UndocumentedField, reference_markdown, sections

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MKDOCS_YML = DOCS / "mkdocs" / "mkdocs.yml"
README_MAX_LINES = 200

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def markdown_files() -> list[Path]:
    """The Markdown a reader follows links in: the README, docs/ and the benchmark results."""
    return [ROOT / "README.md", ROOT / "bench" / "RESULTS.md", *sorted(DOCS.rglob("*.md"))]


def links(text: str) -> list[str]:
    """The targets of the Markdown links in ``text`` (not those inside code)."""
    return _LINK.findall(_CODE.sub("", _FENCE.sub("", text)))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MkDocs write it (``Env multiplexer: BabyAI`` ->
    ``env-multiplexer-babyai``)."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text())
    if path.name == "benchmarks.md":  # the page includes bench/RESULTS.md (pymdownx.snippets)
        text += (ROOT / "bench" / "RESULTS.md").read_text()
    return {slug(h) for h in _HEADING.findall(text)}


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of ``path`` whose file or heading does not exist (named relative to
    ``root``)."""
    out = []
    for target in links(path.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            out.append(f"{path.relative_to(root)}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            out.append(f"{path.relative_to(root)}: {target} (no such heading)")
    return out


def test_links_resolve():
    problems = [p for path in markdown_files() for p in broken_links(path)]
    assert not problems, "\n".join(problems)


def test_link_check_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A part\n")
    page.write_text(
        "[ok](other.md#a-part) [gone](missing.md) [no heading](other.md#nothing) "
        "`[in code](missing.md)` [web](https://example.org/x)\n"
    )
    assert broken_links(page, tmp_path) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#nothing (no such heading)",
    ]


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    assert not any("../shared" in line for line in lines)  # a clone has no ../shared


def test_config_reference_is_current():
    committed = (DOCS / "config-reference.md").read_text()
    assert committed == reference_markdown(), (
        "docs/config-reference.md is not what the config dataclasses generate; run "
        "agentgym config reference --out docs/config-reference.md"
    )


def test_every_config_key_is_in_the_reference():
    page = reference_markdown()
    parts = re.split(r"^## ", page, flags=re.M)
    by_title = {p.split("\n", 1)[0]: p for p in parts[1:]}
    for section in sections():
        title = f"`{section.path}`" if section.path else "Top level"
        assert title in by_title, title
        for key in section.keys:
            name = key.path.rsplit(".", 1)[-1]
            assert f"- **`{name}`** (" in by_title[title], key.path
            assert key.doc, key.path
    paths = [k.path for s in sections() for k in s.keys]
    for expected in ("learner.optim.lr", "sft.optim.lr", "tasks.eval.stop", "envs[].weight"):
        assert expected in paths


def test_an_undocumented_field_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Partly:
        """A section."""

        documented: int = 1
        """Has its docstring."""
        bare: int = 2

    with pytest.raises(UndocumentedField, match="bare"):
        sections(Partly)


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs build needs mkdocs: pip install '.[dev]'")
    pytest.importorskip("material", reason="the docs build needs mkdocs-material")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    config = load_config(str(MKDOCS_YML), site_dir=str(tmp_path / "site"), strict=True)
    build(config)
    assert (tmp_path / "site" / "config-reference" / "index.html").is_file()
    assert "learner.optim" in (tmp_path / "site" / "config-reference" / "index.html").read_text()
