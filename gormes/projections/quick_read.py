"""Quick reads of a projection in an SQLite file, with no event loop.

`gormes jobs list`, `jobs get` and `runs list` are what scripts poll. The usual
path opens the store: trio's import (most of a command's start-up) and a write
transaction that brings the projection up to the log's head. When the projection
in the file is already there (its tracked position is the log's head and this
gormes' version built it: always for the job ledger, kept inline with every
append through gormes' store; for `runs` while a daemon follows the log), its
rows are read on a read-only connection, in one snapshot, and the answer is the
same. Otherwise (a PostgreSQL URL, no file yet, a projection not built or behind,
a file that is not a gormes database, a busy or locked file) it says so, and the
command takes the usual path, which also gives the usual errors.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def read_current_ledger(path: Path | None, fn: Callable[[sqlite3.Connection], T]) -> tuple[bool, T | None]:
    """(True, fn(conn)) when the job ledger in the SQLite file `path` can be read
    quickly (see the module doc), else (False, None). `path` None: the log is not
    an SQLite file (a PostgreSQL URL)."""
    # Lazy for start-up time: loaded only when a quick read is tried.
    from gormes.projections import ledger

    return read_current(path, ledger.NAME, ledger.VERSION, fn)


def read_current(path: Path | None, name: str, version: int,
                 fn: Callable[[sqlite3.Connection], T]) -> tuple[bool, T | None]:
    """(True, fn(conn)) when projection `name`, built by `version`, is at the log's
    head in the SQLite file `path` (see the module doc), else (False, None)."""
    if path is None:
        return False, None
    # Lazy for start-up time: this module is what the CLI's quick reads load
    # (no trio); these are loaded only when a quick read is tried.
    from gormes.errors import GormesError
    from gormes.events.sqlite_schema import check_file
    from gormes.projections import bookkeeping

    try:
        if not path.is_file() or check_file(path):
            return False, None  # no file, or an empty one: the usual path sets it up
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
    except (GormesError, sqlite3.Error, OSError):
        return False, None
    try:
        conn.execute("BEGIN")  # one snapshot for the check and the read
        head = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
        if (bookkeeping.built_version(conn, name) != version
                or bookkeeping.tracked_position(conn, name) != head):
            return False, None
        return True, fn(conn)
    except sqlite3.Error:
        return False, None
    finally:
        conn.close()
