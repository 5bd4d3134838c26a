"""Shared by the doctor's tests: real databases made unhealthy on purpose."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gormes.doctor import CheckResult, DoctorReport, run_doctor
from gormes.events.base import Event
from gormes.events.notes import NoteAdded
from gormes.events.sqlite_log import SQLiteLog

T0 = 1_750_000_000.0  # a fixed "now" (seconds since the epoch)


def fresh(path: Path) -> Path:
    SQLiteLog(path).close()
    return path


def append(path: Path, stream: str, events: Sequence[Event]) -> None:
    log = SQLiteLog(path)
    try:
        log.append_now(stream, list(events))
    finally:
        log.close()


def notes(path: Path, n: int) -> Path:
    append(path, "notes-1", [NoteAdded(text=f"note {i}") for i in range(n)])
    return path


def sql(path: Path, statement: str, params: Sequence[Any] = ()) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(statement, params)
    finally:
        conn.close()


def no_modules(name: str) -> bool:
    return False


def doctor(path: Path, **kwargs: Any) -> DoctorReport:
    kwargs.setdefault("now", T0)
    kwargs.setdefault("modules", no_modules)
    return run_doctor(path, **kwargs)


def check(report: DoctorReport, name: str) -> CheckResult:
    found = [c for c in report.checks if c.name == name]
    assert found, f"{name} did not run: {report.skipped}"
    return found[0]
