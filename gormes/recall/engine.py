"""Reads memory rows for the ranking modules and assembles `RecallResult`s."""

from __future__ import annotations

import sqlite3

from gormes.recall.api import RecallResult


def run_recall(
    conn: sqlite3.Connection, query: str, *, mode: str, k: int, scope: str, cross_scope: bool,
    now: float | None,
) -> RecallResult:
    raise NotImplementedError("recall engine: being built (issue 5)")
