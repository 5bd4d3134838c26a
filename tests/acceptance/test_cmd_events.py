"""`gormes events`, `gormes tail` (without --follow) and `gormes types`."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import SAMPLE, digest, json_lines, run_gormes

from gormes.events.notes import NoteAdded
from gormes.events.sqlite_log import SQLiteLog

LINE_KEYS = ["position", "stream", "version", "type", "schema_version", "recorded_at", "data"]


def test_events_json_lists_every_event_in_position_order(db: Path) -> None:
    result = run_gormes(db, "events", "--json")
    assert result.returncode == 0, result.stderr
    lines = json_lines(result.stdout)
    assert [line["position"] for line in lines] == [1, 2, 3, 4]
    assert [(line["stream"], line["data"]["text"]) for line in lines] == SAMPLE
    assert [line["version"] for line in lines] == [1, 1, 1, 2]
    assert all(list(line) == LINE_KEYS for line in lines)
    assert all(line["type"] == "note.added" for line in lines)
    assert all(isinstance(line["recorded_at"], float) for line in lines)


def test_events_data_is_the_stored_json(db: Path) -> None:
    lines = json_lines(run_gormes(db, "events", "--json", "--limit", "1").stdout)
    assert lines[0]["data"] == {"type": "note.added", "text": "first", "author": "", "tags": []}


def test_events_filters_by_stream_type_after_and_limit(db: Path) -> None:
    def positions(*args: str) -> list[int]:
        result = run_gormes(db, "events", "--json", *args)
        assert result.returncode == 0, result.stderr
        return [line["position"] for line in json_lines(result.stdout)]

    assert positions("--stream", "job-1") == [1, 4]
    assert positions("--stream", "job-*") == [1, 2, 4]
    assert positions("--stream", "run-1", "--stream", "job-2") == [2, 3]
    assert positions("--after", "2") == [3, 4]
    assert positions("--limit", "2") == [1, 2]
    assert positions("--stream", "job-*", "--after", "1", "--limit", "1") == [2]
    assert positions("--type", "note.*") == [1, 2, 3, 4]
    assert positions("--type", "note.added") == [1, 2, 3, 4]
    assert positions("--type", "job.*") == []


def test_events_table_for_people(db: Path) -> None:
    result = run_gormes(db, "events")
    assert result.returncode == 0, result.stderr
    for stream, text in SAMPLE:
        assert stream in result.stdout
        assert text in result.stdout
    assert "position" in result.stdout.splitlines()[0]


def test_events_on_an_empty_log(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    SQLiteLog(path).close()
    assert run_gormes(path, "events", "--json").stdout == ""
    assert "no events" in run_gormes(path, "events").stdout


def test_events_shows_a_row_of_an_unknown_type_unchanged(db: Path) -> None:
    import sqlite3

    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "INSERT INTO events(stream, version, type, type_version, data, recorded_at) "
            "VALUES ('x-1', 1, 'from.the.future', 3, '{\"a\":[1,2]}', 5.0)"
        )
    conn.close()
    lines = json_lines(run_gormes(db, "events", "--json", "--after", "4").stdout)
    assert lines == [{
        "position": 5, "stream": "x-1", "version": 1, "type": "from.the.future",
        "schema_version": 3, "recorded_at": 5.0, "data": {"a": [1, 2]},
    }]


def test_tail_json_matches_events_json(db: Path) -> None:
    tail = run_gormes(db, "tail", "--json")
    events = run_gormes(db, "events", "--json")
    assert tail.returncode == events.returncode == 0
    assert tail.stdout == events.stdout
    assert len(json_lines(tail.stdout)) == 4


def test_tail_filters(db: Path) -> None:
    lines = json_lines(run_gormes(db, "tail", "--json", "--stream", "job-1", "--after", "1").stdout)
    assert [line["position"] for line in lines] == [4]
    assert json_lines(run_gormes(db, "tail", "--json", "--type", "job.*").stdout) == []


def test_tail_human_lines(db: Path) -> None:
    result = run_gormes(db, "tail")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4
    assert lines[0].split()[0] == "1"
    assert "job-1 v1" in lines[0] and "note.added" in lines[0] and '"text":"first"' in lines[0]
    assert "job-1 v2" in lines[3]


def test_read_commands_do_not_change_the_file(db: Path) -> None:
    before = digest(db)
    for args in (["events"], ["events", "--json"], ["tail", "--json"], ["export"],
                 ["query", "select count(*) from events"]):
        assert run_gormes(db, *args).returncode == 0
    assert digest(db) == before


def test_types_lists_the_registered_event_types(tmp_path: Path) -> None:
    result = run_gormes(tmp_path / "unused.db", "types", "--json")
    assert result.returncode == 0, result.stderr
    described = {d["type"]: d for d in json_lines(result.stdout)}
    note = described["note.added"]
    assert note["schema_version"] == NoteAdded.schema_version
    assert note["class"] == "gormes.events.notes.NoteAdded"
    assert [(f["name"], f["required"]) for f in note["fields"]] == [
        ("text", True), ("author", False), ("tags", False),
    ]
    assert list(described) == sorted(described)
    table = run_gormes(tmp_path / "unused.db", "types")
    assert "note.added" in table.stdout and "tags?: tuple[str, ...]" in table.stdout
    assert not (tmp_path / "unused.db").exists()
