"""No file under src/ cites DESIGN.md: the design lives in the repository, in docs/architecture.md
(issue 25). The check runs on the real package (it must hold) and on a small fake tree (it must catch a
citation in a comment, a docstring or a data file, whatever the case)."""

from pathlib import Path

from deploykit.tools.layers import source_root

GONE = "design.md"  # the document outside the repository the code used to cite


def citations(root: Path) -> list[str]:
    """``path:line`` of every line under ``root`` that names DESIGN.md (compiled files skipped)."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # a binary file (a compiled plugin, an image) cites nothing
        found += [
            f"{path.relative_to(root)}:{n}" for n, line in enumerate(text.splitlines(), 1) if GONE in line.lower()
        ]
    return found


def test_nothing_under_src_cites_design_md():
    assert (source_root() / "deploykit").is_dir()
    assert citations(source_root()) == []


def test_the_check_finds_a_citation_wherever_it_is(tmp_path):
    (tmp_path / "deploykit" / "quant").mkdir(parents=True)
    (tmp_path / "deploykit" / "quant" / "cost.py").write_text('"""Rates."""\n\nRATE = 0.8  # measured (DESIGN.md)\n')
    (tmp_path / "deploykit" / "notes.toml").write_text("# see Design.md, section 4\n")
    (tmp_path / "deploykit" / "ok.py").write_text("# see docs/architecture.md\n")
    (tmp_path / "deploykit" / "blob.bin").write_bytes(b"\xff\xfeDESIGN.md")
    assert citations(tmp_path) == ["deploykit/notes.toml:1", "deploykit/quant/cost.py:3"]
