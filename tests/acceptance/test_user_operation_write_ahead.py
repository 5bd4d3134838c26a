"""A user's operation asks to be written ahead: `@gormes.operation(...,
mutating=True, write_ahead=True)` (decision 0067). Its call is a `started`
record, committed before the function runs, then its outcome naming it; a
process killed right after the function's effect leaves the `started` record,
listed by `gormes audit unfinished`. `write_ahead` on an operation that is not
mutating is refused where it is declared."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from cli_helpers import assert_one_line_error, rows, run_gormes

NOTES = '''
import os
import signal
from pathlib import Path

import msgspec

import gormes


class NoteIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    text: str
    crash: bool = False


class NoteOut(msgspec.Struct, kw_only=True):
    written: int


@gormes.operation("notes.write", trust=["operator"], prompt_visible=False, mutating={mutating}, write_ahead=True)
async def write_note(ctx: gormes.OperationContext, input: NoteIn) -> NoteOut:
    """Write a note to a file no log transaction covers."""
    Path({path!r}).write_text(input.text)
    if input.crash:  # the process dies right after the effect, before its outcome is recorded
        os.kill(os.getpid(), signal.SIGKILL)
    return NoteOut(written=len(input.text))
'''


def notes_file(tmp_path: Path, mutating: bool = True) -> tuple[Path, Path]:
    note = tmp_path / "note.txt"
    path = tmp_path / "notes.py"
    path.write_text(NOTES.format(path=str(note), mutating=mutating))
    return path, note


def audits(db: Path) -> list[tuple]:
    return rows(db, "SELECT position, json_extract(data, '$.operation'), json_extract(data, '$.outcome'),"
                    " json_extract(data, '$.started_position') FROM events WHERE type = 'audit.operation'"
                    " ORDER BY position")


def test_the_operations_call_is_its_started_record_then_its_outcome_naming_it(tmp_path: Path):
    db = tmp_path / "g.db"
    notes, note = notes_file(tmp_path)
    listed = run_gormes(db, "ops", "list", "--json", "--import", str(notes))
    assert listed.returncode == 0, listed.stderr
    [spec] = [o for o in json.loads(listed.stdout) if o["name"] == "notes.write"]
    assert spec["write_ahead"] is True
    done = run_gormes(db, "ops", "call", "notes.write", '{"text": "hello"}', "--import", str(notes))
    assert done.returncode == 0, done.stderr
    assert note.read_text() == "hello"
    [(started, _, first, none), (_, _, outcome, named)] = [a for a in audits(db) if a[1] == "notes.write"]
    assert (first, none, outcome, named) == ("started", None, "ok", started)
    assert run_gormes(db, "audit", "unfinished").stdout == "no call without its outcome\n"


def test_a_process_killed_after_the_operations_effect_left_its_started_record(tmp_path: Path):
    db = tmp_path / "g.db"
    notes, note = notes_file(tmp_path)
    killed = run_gormes(db, "ops", "call", "notes.write", '{"text": "kept", "crash": true}', "--import", str(notes))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert note.read_text() == "kept"
    assert [a[1:] for a in audits(db)] == [("notes.write", "started", None)]
    [listed] = [json.loads(line) for line in run_gormes(db, "audit", "unfinished", "--json").stdout.splitlines()]
    assert (listed["operation"], listed["outcome"]) == ("notes.write", "started")
    assert run_gormes(db, "audit", "verify").returncode == 0


def test_write_ahead_on_an_operation_that_changes_nothing_is_refused(tmp_path: Path):
    notes, _ = notes_file(tmp_path, mutating=False)
    done = run_gormes(tmp_path / "g.db", "ops", "list", "--import", str(notes))
    assert done.returncode == 2
    assert "write_ahead audits a change before it is made" in assert_one_line_error(done)
