"""Projection lag and failed batches."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from doctor_helpers import check, doctor, fresh, notes

from gormes.health import Thresholds
from gormes.projections import bookkeeping


def _bookkeeping(path: Path, fn) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        bookkeeping.ensure_tables(conn)
        fn(conn)
    finally:
        conn.close()


def test_lag_over_the_threshold_names_the_projection(db_path: Path):
    notes(db_path, 10)

    def built_but_behind(conn):
        bookkeeping.set_built_version(conn, "streams", 1)
        bookkeeping.set_position(conn, "streams", 2)

    _bookkeeping(db_path, built_but_behind)
    result = check(doctor(db_path, thresholds=Thresholds(projection_lag_warn=5)), "projections.lag")
    assert result.status == "warn"
    assert "streams (8 events behind)" in result.message
    assert "runs (never built)" in result.message
    assert result.remediation


def test_lag_within_the_threshold_is_ok(db_path: Path):
    result = check(doctor(notes(db_path, 3)), "projections.lag")
    assert result.status == "ok"


def test_a_projection_built_by_another_version_is_named(db_path: Path):
    notes(db_path, 1)
    _bookkeeping(db_path, lambda conn: bookkeeping.set_built_version(conn, "runs", 99))
    result = check(doctor(db_path), "projections.lag")
    assert result.status == "warn" and "runs (built by v99" in result.message


def test_lag_needs_the_daemon(db_path: Path):
    report = doctor(fresh(db_path), offline=True)
    assert "projections.lag" in {s.name for s in report.skipped}


def test_an_open_failure_row_fails(db_path: Path):
    notes(db_path, 4)
    _bookkeeping(db_path, lambda conn: bookkeeping.record_failure(
        conn, "runs", 1, 1, 4, "KeyError: 'x'", 1.0,
    ))
    report = doctor(db_path, offline=True)
    result = check(report, "projections.failures")
    assert result.status == "fail"
    assert "runs: 1 failed batch(es), last: KeyError: 'x'" in result.message
    assert report.status == "error"


def test_a_resolved_failure_is_not_reported(db_path: Path):
    notes(db_path, 4)

    def failed_then_resolved(conn):
        bookkeeping.record_failure(conn, "runs", 1, 1, 4, "boom", 1.0)
        bookkeeping.resolve_failures(conn, "runs", 2.0)

    _bookkeeping(db_path, failed_then_resolved)
    assert check(doctor(db_path), "projections.failures").status == "ok"
