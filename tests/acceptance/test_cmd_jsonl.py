"""`gormes export` and `gormes import`: the log as JSON lines, and back."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cli_helpers import SAMPLE, assert_one_line_error, json_lines, run_gormes

from gormes.events.notes import NoteAdded
from gormes.events.sqlite_log import SQLiteLog


def events_of(db: Path) -> list[tuple[int, str, int, object]]:
    log = SQLiteLog(db, readonly=True)
    try:
        # Each import is also one audit event (audit-* streams) and one log.imported
        # (log-imports, decision 0087), written after it.
        return [(r.position, r.stream, r.version, r.event) for r in log.read_all()
                if not r.stream.startswith("audit-") and r.stream != "log-imports"]
    finally:
        log.close()


def refused_imports(db: Path) -> list[str]:
    """The audit records of refused imports: each names the line that stopped it."""
    log = SQLiteLog(db, readonly=True)
    try:
        return [r.event.error for r in log.read_all()
                if r.stream.startswith("audit-") and r.event.operation == "events.import"
                and r.event.outcome != "ok"]
    finally:
        log.close()


def test_export_is_the_shape_of_tail_json(db: Path) -> None:
    exported = run_gormes(db, "export")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == run_gormes(db, "tail", "--json").stdout
    assert [(line["stream"], line["data"]["text"]) for line in json_lines(exported.stdout)] == SAMPLE


def test_export_filters_and_writes_a_file(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    result = run_gormes(db, "export", "--after", "1", "--type", "note.*", "--stream", "job-*",
                        "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert [line["position"] for line in json_lines(out.read_text())] == [2, 4]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out")) == []


def test_export_then_import_round_trips(db: Path, tmp_path: Path) -> None:
    dump = tmp_path / "dump.jsonl"
    assert run_gormes(db, "export", "--out", str(dump)).returncode == 0
    copy = tmp_path / "copy.db"
    imported = run_gormes(copy, "import", str(dump), "--json")
    assert imported.returncode == 0, imported.stderr
    sha256 = hashlib.sha256(dump.read_bytes()).hexdigest()
    # the import's own record (decision 0087) goes after the lines, at position 5
    assert json_lines(imported.stdout) == [{"imported": 4, "first_position": 1, "last_position": 4,
                                            "recorded_at": 5, "sha256": sha256}]
    assert events_of(copy) == events_of(db)


def test_import_from_stdin_with_only_the_required_keys(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    lines = "\n".join(
        json.dumps({"stream": s, "type": "note.added", "data": {"text": t}}) for s, t in SAMPLE
    )
    result = run_gormes(db, "import", "-", input=lines + "\n\n")
    assert result.returncode == 0, result.stderr
    assert "imported 4 events (positions 1..4)" in result.stdout
    assert [(s, e.text) for _, s, _, e in events_of(db)] == SAMPLE


def test_import_refuses_the_same_export_twice(db: Path, tmp_path: Path) -> None:
    dump = tmp_path / "dump.jsonl"
    dump.write_text(run_gormes(db, "export").stdout)
    before = events_of(db)
    line = assert_one_line_error(run_gormes(db, "import", str(dump)))
    assert line.startswith("gormes: error: line 1: stream 'job-1' is at version 2")
    assert events_of(db) == before  # the refusal is one audit record
    again = run_gormes(db, "import", str(dump), "--ignore-versions")
    assert again.returncode == 0, again.stderr
    assert [(p, s, v) for p, s, v, _ in events_of(db)][4:] == [
        (6, "job-1", 3), (7, "job-2", 2), (8, "run-1", 2), (9, "job-1", 4),
    ]  # position 5: the audit record of the refused import


def good_line(i: int) -> str:
    return json.dumps({"stream": f"s-{i % 3}", "type": "note.added", "data": {"text": f"n{i}"}})


def test_a_bad_line_is_reported_by_number_and_nothing_is_written(db: Path) -> None:
    bad_lines = {
        "{not json": "line 3: malformed JSON",
        '{"stream": "s", "type": "note.added"}': "line 3: Object missing required field `data`",
        '{"stream": "s", "type": "nope", "data": {}}': "line 3: unknown event type 'nope'",
        '{"stream": "s", "type": "note.added", "data": {"text": 1}}': "line 3: invalid data",
        '{"stream": "", "type": "note.added", "data": {"text": "x"}}': "line 3: stream must not be empty",
        '{"stream": "s", "type": "note.added", "data": {"type": "x.y", "text": "x"}}':
            "line 3: data says type 'x.y'",
    }
    before = events_of(db)
    for bad, expected in bad_lines.items():
        text = "\n".join([good_line(1), good_line(2), bad, good_line(4)])
        line = assert_one_line_error(run_gormes(db, "import", "-", input=text))
        assert line.startswith(f"gormes: error: {expected}"), line
    # the lines before the bad one were streamed in and undone with it; the
    # refusal itself is audited, naming the line
    assert events_of(db) == before
    refused = refused_imports(db)
    assert len(refused) == len(bad_lines) and all("line 3" in error for error in refused)


def test_a_version_conflict_late_in_the_file_writes_nothing(db: Path) -> None:
    text = "\n".join([
        good_line(1),
        json.dumps({"stream": "fresh", "type": "note.added", "data": {"text": "a"}, "version": 1}),
        json.dumps({"stream": "fresh", "type": "note.added", "data": {"text": "b"}, "version": 3}),
    ])
    before = events_of(db)
    line = assert_one_line_error(run_gormes(db, "import", "-", input=text))
    assert "line 3" in line
    assert events_of(db) == before  # the refusal is one audit record
    assert len(events_of(db)) == 4


def test_import_of_a_missing_or_empty_file(db: Path, tmp_path: Path) -> None:
    before = events_of(db)
    missing = assert_one_line_error(run_gormes(db, "import", str(tmp_path / "no.jsonl")))
    assert f"cannot read {tmp_path / 'no.jsonl'}" in missing
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert f"{empty} holds no events" in assert_one_line_error(run_gormes(db, "import", str(empty)))
    assert "- holds no events" in assert_one_line_error(run_gormes(db, "import", "-", input=""))
    assert events_of(db) == before and len(refused_imports(db)) == 3


def test_a_large_import_is_one_transaction(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    text = "\n".join(good_line(i) for i in range(5000))
    result = run_gormes(db, "import", "-", input=text)
    assert result.returncode == 0, result.stderr
    records = events_of(db)
    assert [p for p, *_ in records] == list(range(1, 5001))
    log = SQLiteLog(db, readonly=True)
    try:
        assert len({r.recorded_at for r in log.read_all() if not r.stream.startswith("audit-")}) == 1
    finally:
        log.close()
    exported = run_gormes(db, "export", "--after", "4990")
    assert [line["data"]["text"] for line in json_lines(exported.stdout)
            if not line["stream"].startswith("audit-") and line["stream"] != "log-imports"] == [
        f"n{i}" for i in range(4990, 5000)
    ]
    assert NoteAdded(text="n0") == records[0][3]
