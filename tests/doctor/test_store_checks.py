"""Store checks on databases damaged on purpose."""

from __future__ import annotations

from pathlib import Path

from doctor_helpers import check, doctor, fresh, notes, sql

from gormes.events.sqlite_schema import SCHEMA_VERSION
from gormes.health.store import integrity_verdict, parse_quick_check


def test_a_fresh_database_passes_every_store_check(db_path: Path):
    report = doctor(fresh(db_path), offline=True)
    for name in ("store.schema", "store.wal", "store.integrity", "store.positions", "store.event_types",
                 "store.event_streams"):
        assert check(report, name).status == "ok", check(report, name)


def test_a_deleted_row_is_a_gap_named_by_its_position(db_path: Path):
    sql(notes(db_path, 5), "DELETE FROM events WHERE position = 3")
    result = check(doctor(db_path), "store.positions")
    assert result.status == "fail"
    assert "1 position(s) missing" in result.message and ": 3" in result.message
    assert result.remediation


def test_gaps_at_the_start_and_in_the_middle_are_both_named(db_path: Path):
    notes(db_path, 8)
    sql(db_path, "DELETE FROM events WHERE position IN (1, 2, 5, 6)")
    result = check(doctor(db_path), "store.positions")
    assert result.status == "fail"
    assert "1..2" in result.message and "5..6" in result.message


def test_a_deleted_last_row_is_not_a_gap(db_path: Path):
    # SQLite hands the last rowid out again: the log is still gap-free
    sql(notes(db_path, 3), "DELETE FROM events WHERE position = 3")
    assert check(doctor(db_path), "store.positions").status == "ok"


def test_unknown_event_types_are_counted_by_type(db_path: Path):
    notes(db_path, 1)
    for version in (1, 2):
        sql(db_path, "INSERT INTO events(stream, version, type, data, recorded_at) "
                     "VALUES ('x-1', ?, 'alien.landed', '{}', 0)", (version,))
    sql(db_path, "INSERT INTO events(stream, version, type, type_version, data, recorded_at) "
                 "VALUES ('notes-1', 2, 'note.added', 9, '{}', 0)")
    result = check(doctor(db_path), "store.event_types")
    assert result.status == "warn"
    assert "alien.landed (2)" in result.message
    assert "note.added v9 (1)" in result.message
    assert "3 event(s)" in result.message


def test_events_off_their_family_of_streams_are_counted_by_type(db_path: Path):
    """What an older gormes imported (decision 0086): a memory claim on a notes
    stream, a run's start on a stream not a run's; a note is at home anywhere."""
    notes(db_path, 2)
    for stream, type_ in (("notes-x", "memory.forgotten"), ("zzzz1", "run.started"), ("run-", "run.started"),
                          ("run-1", "note.added")):
        sql(db_path, "INSERT INTO events(stream, version, type, data, recorded_at) VALUES (?, 1, ?, '{}', 0)",
            (stream, type_))
    result = check(doctor(db_path), "store.event_streams")
    assert result.status == "warn"
    assert "3 event(s) off their type's family" in result.message
    assert "memory.forgotten (1)" in result.message and "run.started (2)" in result.message
    assert "first at position(s) 3, 4, 5" in result.message


def test_a_database_not_in_wal_mode_is_a_warning(db_path: Path):
    sql(fresh(db_path), "PRAGMA journal_mode=DELETE")
    result = check(doctor(db_path), "store.wal")
    assert result.status == "warn" and "delete" in result.message


def test_a_newer_schema_fails_and_skips_the_other_database_checks(db_path: Path):
    sql(fresh(db_path), f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    report = doctor(db_path)
    assert check(report, "store.schema").status == "fail"
    assert "newer" in check(report, "store.schema").message
    assert report.status == "error"
    assert "store.positions" in {s.name for s in report.skipped}
    assert check(report, "disk.free").status == "ok"  # needs no database


def test_a_foreign_sqlite_file_is_refused(db_path: Path):
    sql(db_path, "CREATE TABLE t(x)")
    result = check(doctor(db_path), "store.schema")
    assert result.status == "fail" and "not a gormes database" in result.message


def test_a_missing_database_fails(tmp_path: Path):
    report = doctor(tmp_path / "nope.db")
    assert check(report, "store.schema").status == "fail"
    assert report.status == "error"


def test_an_empty_file_is_a_warning_not_a_crash(db_path: Path):
    db_path.write_bytes(b"")
    assert check(doctor(db_path), "store.schema").status == "warn"


def test_quick_check_output_is_parsed():
    assert parse_quick_check([("ok",)]) == []
    problems = parse_quick_check([("row 3 missing from index x",), ("wrong # of entries in index x",)])
    assert len(problems) == 2
    verdict = integrity_verdict(problems)
    assert verdict.status == "fail"
    assert "row 3 missing from index x (+1 more)" in verdict.message
    assert integrity_verdict([]).status == "ok"


def test_a_corrupted_page_fails_the_integrity_check(db_path: Path):
    notes(db_path, 2000)  # several pages of rows and of the (stream, version) index
    sql(db_path, "PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db_path.read_bytes())
    page = 4096
    assert len(data) > 6 * page
    data[3 * page:4 * page] = b"\xa5" * page  # garbage over a page of a b-tree
    db_path.write_bytes(bytes(data))
    report = doctor(db_path)
    result = check(report, "store.integrity")
    assert result.status == "fail", result
    assert report.status == "error"
