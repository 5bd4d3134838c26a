"""The doctor's log scan goes on from where the last run left off; --full scans all of it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
from doctor_helpers import append, check, doctor, notes, sql

from gormes.events.base import UnknownEvent
from gormes.events.codec import default_codec
from gormes.events.catalog import load_all
from gormes.health import scan


def _remembered(path: Path) -> scan.LogSummary | None:
    conn = sqlite3.connect(path)
    try:
        return scan.load(conn)
    finally:
        conn.close()


def test_a_second_run_folds_only_what_was_appended_and_full_folds_everything(db_path: Path):
    notes(db_path, 5)
    first = check(doctor(db_path, offline=True), "store.positions")
    assert first.status == "ok" and "1..5" in first.message
    assert _remembered(db_path).position == 5
    # a row below the remembered position deleted outside gormes, then more appended
    sql(db_path, "DELETE FROM events WHERE position = 2")
    append(db_path, "notes-2", [UnknownEvent(type="plugin.thing", data={"a": 1}, schema_version=1)])
    report = doctor(db_path, offline=True)
    # the new event is seen (its type unknown), the old deletion is not: that is --full's
    assert check(report, "store.event_types").status == "warn"
    assert "plugin.thing (1)" in check(report, "store.event_types").message
    assert check(report, "store.positions").status == "ok"
    assert _remembered(db_path).position == 6
    full = check(doctor(db_path, offline=True, full=True), "store.positions")
    assert full.status == "fail" and ": 2" in full.message


def test_without_full_the_integrity_verdict_is_the_last_full_checks(db_path: Path):
    notes(db_path, 3)
    assert "last full check" not in check(doctor(db_path, offline=True), "store.integrity").message
    again = check(doctor(db_path, offline=True), "store.integrity")
    assert again.status == "ok" and "the last full check" in again.message
    full = check(doctor(db_path, offline=True, full=True), "store.integrity")
    assert full.status == "ok" and "last full check" not in full.message


def test_a_log_folded_in_two_parts_gives_the_summary_of_one_pass(tmp_path: Path):
    # a real log: the demo's jobs, runs with subagents and tool calls, audit records
    db = tmp_path / "demo.db"
    subprocess.run([sys.executable, "-m", "gormes", "--db", str(db), "demo"], check=True,
                   capture_output=True)
    load_all()
    conn = sqlite3.connect(db)
    rows = conn.execute(scan._rows_sql(conn).replace("LIMIT ?", ""), (0, 10**9)).fetchall()
    conn.close()

    def known(type_: str, version: int) -> bool:
        cls = default_codec.class_for(type_)
        return cls is not None and version <= cls.schema_version

    whole = scan.LogSummary()
    scan.Folder(whole, known).fold(rows)
    for cut in (1, len(rows) // 3, len(rows) // 2, len(rows) - 1):
        parts = scan.LogSummary()
        scan.Folder(parts, known).fold(rows[:cut])
        parts = msgspec.json.decode(msgspec.json.encode(parts), type=scan.LogSummary)  # kept, reloaded
        scan.Folder(parts, known).fold(rows[cut:])
        assert parts == whole, cut
    assert whole.started >= 3 and not whole.open_runs and whole.count == len(rows)


def test_gormes_doctor_full_on_the_command_line(db_path: Path):
    notes(db_path, 2)
    # the first run of a database is a full one; the second goes on from it
    for args, incremental in (([], False), ([], True), (["--full"], False)):
        done = subprocess.run(
            [sys.executable, "-m", "gormes", "--db", str(db_path), "doctor", "--offline", *args],
            capture_output=True, text=True,
        )
        assert done.returncode == 0, done.stderr
        assert ("last full check" in done.stdout) == incremental
