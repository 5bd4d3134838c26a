"""What the approvals index's tests share: a request, the oracle (the fold of the
whole `approvals` stream, decision 0057's contract), the reads checked against
it, SQLite VM instructions counted, and a database on either backend."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pg_helpers import PG_URL, fresh_schema

from gormes.actors.runs.approval_book import read_approval, read_approvals
from gormes.events.approvals import APPROVALS_STREAM, Approval, ApprovalRequested, fold_approvals
from gormes.events.sqlite import SQLiteEventStore

NOW = 1_000_000
STATUSES = ("pending", "approved", "denied", "timed_out", "all")


def request(approval_id: str, *, expires_at: int | None = None) -> ApprovalRequested:
    return ApprovalRequested(
        approval_id=approval_id, operation="shell.run", arguments="{}", args_hash="h", run_id=None,
        caller="mcp:client", trust="gateway", why="deployment rule 'shell.*'", expires_at=expires_at, at=NOW,
    )


async def whole_stream_fold(store: Any) -> dict[str, Approval]:
    """The oracle: every approval as the fold of the whole stream says it is."""
    return fold_approvals([(r.position, r.event) for r in await store.read_stream(APPROVALS_STREAM)])


def as_listed(approvals: dict[str, Approval], status: str, limit: int | None) -> list[tuple[str, Approval]]:
    """What a listing of `status` must return, by the oracle: the newest `limit`
    approvals of that status, oldest first."""
    kept = sorted((a for a in approvals.values() if status == "all" or a.status == status),
                  key=lambda a: a.requested_position)
    if limit is not None:
        kept = kept[max(0, len(kept) - limit):]
    return [(a.request.approval_id, a) for a in kept]


async def assert_reads_agree(store: Any, ids: list[str]) -> dict[str, Approval]:
    """Every listing (each status, whole and limited) and every read by id of
    `ids` returns what the whole stream's fold says; the oracle."""
    oracle = await whole_stream_fold(store)
    for status in STATUSES:
        for limit in (None, 1, 2, 3):
            got = await read_approvals(store, status=status, limit=limit)
            assert list(got.items()) == as_listed(oracle, status, limit), (status, limit)
    for approval_id in ids:
        assert await read_approval(store, approval_id) == oracle.get(approval_id), approval_id
    return oracle


@contextmanager
def counting(conn: Any) -> Iterator[list[int]]:
    """The SQLite VM instructions `conn` runs meanwhile: the work of its statements,
    rows scanned included, and the same on any machine."""
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    conn.set_progress_handler(step, 1)
    try:
        yield steps
    finally:
        conn.set_progress_handler(None, 1)


@contextmanager
def counting_reads(store: SQLiteEventStore) -> Iterator[list[int]]:
    """The SQLite VM instructions of every `read_with` on `store` meanwhile (each
    runs on one of its read connections)."""
    steps = [0]
    read_with = store.read_with

    async def counted(fn: Any) -> Any:
        def run(log: Any) -> Any:
            with counting(log.conn) as these:
                try:
                    return fn(log)
                finally:
                    steps[0] += these[0]

        return await read_with(run)

    store.read_with = counted  # type: ignore[method-assign]
    try:
        yield steps
    finally:
        del store.read_with  # the class's method again


@contextmanager
def database(tmp_path: Path, backend: str) -> Iterator[str]:
    """An SQLite file's path, or a fresh PostgreSQL schema's name."""
    if backend == "sqlite":
        yield str(tmp_path / "gormes.db")
        return
    with fresh_schema() as schema:
        yield schema


def open_on(backend: str, where: str, **options: Any) -> Any:
    """A store on the database (another one on the same database each call)."""
    if backend == "sqlite":
        return SQLiteEventStore.open(where, **options)
    from gormes.events.postgres import PostgresEventStore

    return PostgresEventStore.open(PG_URL, schema=where, poll_interval=0.05, **options)
