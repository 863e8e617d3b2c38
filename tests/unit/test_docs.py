"""The repository explains itself: every doc the code cites is in docs/ (with the section named),
and nothing cites a document that is not in the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = [p for folder in ("cli", "core", "kernels", "pkg", "tests", "tools", "examples")
           for p in (REPO / folder).rglob("*.py") if ".venv" not in p.parts]  # fmt: skip
ELSEWHERE = re.compile(r"\b(?:DESIGN|QWEN3_TTS|REFERENCE|STYLE)\.md\b|\.\./shared")
CITED = re.compile(r'docs/([\w-]+\.md)(?:,\s*"([^"]+)")?')


def test_no_document_outside_the_repository_is_cited():
    here = Path(__file__).name
    bad = [f"{p.relative_to(REPO)}:{n}" for p in SOURCES if p.name != here
           for n, line in enumerate(p.read_text("utf-8").splitlines(), 1)
           if ELSEWHERE.search(line)]  # fmt: skip
    bad += [str(p.relative_to(REPO)) for p in [REPO / "README.md", *(REPO / "docs").glob("*.md")]
            if ELSEWHERE.search(p.read_text("utf-8"))]  # fmt: skip
    assert bad == []


def test_every_cited_doc_and_section_exists():
    missing = []
    for p in [*SOURCES, REPO / "README.md"]:
        text = " ".join(p.read_text("utf-8").split())  # citations may wrap across lines
        for name, section in CITED.findall(text):
            doc = REPO / "docs" / name
            if not doc.is_file():
                missing.append(f"{p.relative_to(REPO)}: docs/{name}")
            elif section and f"## {section}" not in doc.read_text("utf-8"):
                missing.append(f"{p.relative_to(REPO)}: docs/{name}, {section!r}")
    assert missing == []


PATH_NAMED = re.compile(
    r"(?<![\w/.])((?:cli|core|kernels|tests|tools|examples|docs|\.ci)/[\w./-]*\w)"
)
MODULE_NAMED = re.compile(r"\bqtts\.((?:cli|core|kernels)(?:\.[a-z_]\w*)+)")


def _module_file(dotted: list[str]) -> Path | None:
    base = REPO.joinpath(*dotted)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_reference_resolves(name: str) -> bool:
    """qtts.a.b.c: the longest prefix that is a module, and the name after it defined there."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        found = _module_file(parts[:cut])
        if found is not None:
            return cut == len(parts) or re.search(rf"\b{parts[cut]}\b", found.read_text("utf-8"))
    return False


def test_every_path_and_module_named_in_the_code_exists():
    missing = []
    for p in SOURCES + [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        text = p.read_text("utf-8")
        for path in PATH_NAMED.findall(text):
            if "*" not in path and not (REPO / path).exists():
                missing.append(f"{p.relative_to(REPO)}: {path}")
        for name in MODULE_NAMED.findall(text):
            if not _module_reference_resolves(name):
                missing.append(f"{p.relative_to(REPO)}: qtts.{name}")
    assert missing == []


# Folders whose row in the layout table names each of their subfolders (`rows/`, `work/`, ...).
SUBDIVIDED = ("core/jobs", "tests/unit/jobs")


def _subfolders(parent: Path) -> set[str]:
    """The folders under parent that hold Python files (a package, or a folder of tests)."""
    return {p.name for p in parent.iterdir() if p.is_dir() and any(p.glob("*.py"))}


def test_the_layout_table_covers_the_tree():
    """Every package folder of cli/, core/ and kernels/ has a row in the layout table
    (docs/engine.md, "How it works"), and the rows of core/jobs/ and tests/unit/jobs/ name each
    of their subfolders."""
    text = (REPO / "docs" / "engine.md").read_text("utf-8")
    section = text[text.index("## How it works") :]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    named = {m for line in rows for m in re.findall(r"`((?:cli|core|kernels)/[\w/]*)`", line)}
    folders = {"cli/", "kernels/"} | {
        f"core/{p.name}/" for p in (REPO / "core").iterdir() if (p / "__init__.py").is_file()
    }
    missing = sorted(folders - named)
    for parent in SUBDIVIDED:
        own = [line for line in rows if f"`{parent}/`" in line.split(" | ")[0]]
        subs = {m for line in own for m in re.findall(rf"`(?:{parent}/)?(\w+)/`", line)}
        missing += [f"{parent}/{name}/" for name in sorted(_subfolders(REPO / parent) - subs)]
        if not own:
            missing.append(f"{parent}/ (no row)")
    assert missing == []


def test_the_one_pass_reads_as_the_code():
    """docs/architecture.md, "One pass": each block is the code of the pass it names, line for
    line (indentation aside), so the page cannot drift from the functions it shows."""
    doc = (REPO / "docs" / "architecture.md").read_text("utf-8")
    section = doc.split("\n## One pass\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    synthesizer = "core/synthesis/synthesizer.py"  # its pass, then its engine pass
    sources = ["core/jobs/execution/locked_run.py", synthesizer, synthesizer]
    assert len(blocks) == len(sources)
    for block, source in zip(blocks, sources, strict=True):
        code = [line.strip() for line in (REPO / source).read_text("utf-8").splitlines()]
        shown = [line.strip() for line in block.splitlines()]
        assert any(code[i : i + len(shown)] == shown for i in range(len(code))), source
