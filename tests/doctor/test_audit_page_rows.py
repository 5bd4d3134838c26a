"""docs/audit.md's record schema table lists the export's fields and nothing else;
the generator takes taxonomy rows pasted outside its markers back out (issue 19,
item 10)."""

from __future__ import annotations

from pathlib import Path

from gormes.audit_export import AuditRecord
from gormes.audit_taxonomy import BEGIN, render, taxonomy
from gormes.tools.builtin import default_registry

DOC = Path(__file__).parents[2] / "docs" / "audit.md"


def record_table(page: str) -> list[str]:
    lines = page.split("| field | type | meaning |\n|---|---|---|\n", 1)[1].splitlines()
    return [line for line in lines[: lines.index("")]]


def test_the_record_table_is_the_record_fields_only():
    rows = record_table(DOC.read_text())
    assert [row.split("`")[1] for row in rows] == list(AuditRecord.__struct_fields__)


def test_rows_pasted_outside_the_markers_are_taken_out():
    specs = default_registry().list()
    page = render(DOC.read_text(), specs)
    pasted_rows = [line for line in taxonomy(specs).splitlines() if line.startswith("| `")][:3]
    head, _, rest = page.partition(BEGIN)
    table_end = head.index("\n\n", head.index("| field | type | meaning |"))
    broken = head[:table_end] + "\n" + "\n".join(pasted_rows) + head[table_end:] + BEGIN + rest
    assert record_table(broken)[-3:] == pasted_rows  # what the page once looked like
    assert render(broken, specs) == page
    hand_written = head.replace("## Export", "## Export\n\n| `mine` | `not generated` |", 1) + BEGIN + rest
    assert "| `mine` | `not generated` |" in render(hand_written, specs)
