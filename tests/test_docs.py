"""The docs are checked against the code: the tables generated from it are current."""

from __future__ import annotations

from assay import docgen
from tests.conftest import REPO

DOCS = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]


def test_generated_tables_are_current() -> None:
    stale = docgen.stale(REPO)
    assert not stale, f"{', '.join(stale)}: generated tables are stale; run `python -m assay.docgen`"


def test_every_generated_table_is_in_the_docs() -> None:
    found = [name for path in DOCS for name in docgen.tables_in(path.read_text(encoding="utf-8"))]
    assert sorted(found) == sorted(docgen.TABLES), "each table goes between its markers in exactly one doc"


def test_a_table_between_markers_is_made_afresh() -> None:
    text = "intro\n<!-- generated: claim-transitions -->\nold rows\n<!-- end generated -->\nafter\n"
    made = docgen.regenerate(text)
    assert "old rows" not in made and "| `force_release` |" in made and made.endswith("<!-- end generated -->\nafter\n")
    assert docgen.regenerate(made) == made
