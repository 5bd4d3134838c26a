"""`gormes demo` writes into a fresh database only: on one that already holds
events it refuses in one line (exit 2) naming the file, and writes nothing."""

from __future__ import annotations

from cli_helpers import assert_one_line_error, digest, run_gormes, write_notes


def test_demo_refuses_a_database_that_holds_events(tmp_path):
    db = tmp_path / "mine.db"
    write_notes(db, [("notes", "my own work"), ("notes", "more of it")])
    before = digest(db)
    done = run_gormes(db, "demo")
    line = assert_one_line_error(done)
    assert done.returncode == 2
    assert f"{db} already holds 2 events" in line and "give --db a new file" in line
    assert digest(db) == before
