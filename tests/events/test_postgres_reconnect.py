"""The Postgres store survives losing its connections, on the real server.

Writers append with `expected_version=ANY` and unique texts, so an event written
twice would show up as an extra row; every acknowledged append must be there
exactly once, positions must stay gap-free, and a follower must see every
position once, in order, across the outage.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import trio
from pg_helpers import PG_URL, admin, fresh_schema

from gormes.events.notes import NoteAdded
from gormes.events.postgres import PostgresEventStore
from gormes.events.postgres_log import PostgresLog

WRITERS = 6
APPENDS_EACH = 50


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        yield name


def terminate_backends(application_name: str) -> int:
    rows = admin(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        (application_name,),
    )
    return len(rows)


async def run_appenders_through(
    schema: str, outage: Callable[[str], Awaitable[None]], outages_at: list[int]
) -> None:
    """Append from several tasks while `outage` strikes after the given numbers of
    acknowledgements; then check nothing acknowledged was lost or written twice."""
    app = f"gormes-test-{secrets.token_hex(4)}"
    total = WRITERS * APPENDS_EACH
    acknowledged: dict[str, int] = {}  # text -> position
    followed: list[int] = []
    outage_done = trio.Event()
    # While an outage is being struck no writer starts an append, so that the next
    # outage comes after appends committed on connections made since (on a loaded
    # machine the strike itself can lag: two of them back to back found nothing left
    # to kill the second time).
    striking: trio.Event | None = None

    async with PostgresEventStore.open(
        PG_URL, schema=schema, application_name=app, poll_interval=0.2
    ) as store:

        async def writer(w: int) -> None:
            nonlocal striking
            for j in range(APPENDS_EACH):
                while striking is not None:
                    await striking.wait()
                text = f"{w}/{j}"
                result = await store.append(f"w{w}", [NoteAdded(text=text)])
                acknowledged[text] = result.last_position
                if len(acknowledged) in outages_at:
                    striking = trio.Event()
                    try:
                        await outage(app)
                    finally:
                        striking.set()
                        striking = None

        async def follower() -> None:
            async for record in store.subscribe(after=0):
                followed.append(record.position)
                if len(followed) == total:
                    return

        with trio.fail_after(180):  # a guard against hanging, not a timing assertion
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follower)
                async with trio.open_nursery() as writers:
                    for w in range(WRITERS):
                        writers.start_soon(writer, w)
        outage_done.set()
        records = await store.read_all()
        assert store.writer_reconnects >= 1  # the outage did hit the writer

    assert len(acknowledged) == total
    assert [r.position for r in records] == list(range(1, total + 1))
    texts = [r.event.text for r in records]
    assert len(set(texts)) == len(texts)  # nothing written twice
    by_text = {r.event.text: r.position for r in records}
    assert by_text == acknowledged  # nothing acknowledged lost, each at its position
    for w in range(WRITERS):
        versions = [r.version for r in records if r.stream == f"w{w}"]
        assert versions == list(range(1, APPENDS_EACH + 1))
    assert followed == list(range(1, total + 1))


async def test_appends_resume_after_the_server_kills_every_connection(schema):
    kills: list[int] = []

    async def kill_all(app: str) -> None:
        kills.append(await trio.to_thread.run_sync(terminate_backends, app))

    await run_appenders_through(schema, kill_all, outages_at=[40, 120, 200])
    assert len(kills) == 3 and all(k >= 1 for k in kills)


def pg_cluster() -> tuple[str, str] | None:
    """(version, name) of the local cluster when pg_ctlcluster can restart it."""
    if shutil.which("pg_ctlcluster") is None or os.geteuid() != 0:
        return None
    versions = sorted(p.name for p in Path("/etc/postgresql").glob("*") if (p / "main").is_dir())
    return (versions[-1], "main") if versions else None


@pytest.mark.slow
async def test_appends_resume_after_the_server_restarts(schema):
    cluster = pg_cluster()
    if cluster is None:
        pytest.skip("restarting the server needs root and pg_ctlcluster")
    restarts: list[int] = []

    async def restart(app: str) -> None:
        done = await trio.run_process(
            ["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, "restart"],
            capture_stdout=True, capture_stderr=True, check=False,
        )
        restarts.append(done.returncode)

    await run_appenders_through(schema, restart, outages_at=[100])
    assert restarts == [0]


def test_the_server_tells_whether_a_lost_transaction_committed(schema):
    """The building block of "nothing written twice": pg_xact_status after the fact."""
    url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    admin(f'CREATE TABLE "{schema}".events(position bigint)')
    with psycopg.connect(url, autocommit=True) as conn:
        log = PostgresLog(conn)
        xid, head = log.begin_write()
        conn.execute("INSERT INTO events VALUES (1)")
        conn.execute("COMMIT")
        assert (head, log.xact_status(xid)) == (0, "committed")
    # Not `with`: leaving the block would COMMIT on the dead connection, and
    # psycopg can still think it open when the FATAL notice came before the EOF.
    doomed = psycopg.connect(url, autocommit=True)
    try:
        doomed_log = PostgresLog(doomed)
        lost_xid, _ = doomed_log.begin_write()
        doomed.execute("INSERT INTO events VALUES (2)")
        # The timeout makes the server wait until the backend is gone, so the
        # COMMIT below cannot race ahead of the signal.
        admin("SELECT pg_terminate_backend(%s, 10000)", (doomed.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            doomed.execute("COMMIT")
    finally:
        doomed.close()
    with psycopg.connect(url, autocommit=True) as conn:
        status = PostgresLog(conn).xact_status(lost_xid)
        while status == "in progress":  # the killed backend is still rolling back
            status = PostgresLog(conn).xact_status(lost_xid)
        assert status == "aborted"
        assert conn.execute("SELECT position FROM events").fetchall() == [(1,)]
