"""`gormes projections status|rebuild` on a PostgreSQL URL, run as real processes
(the SQLite side is tests/cli/test_projections_cli.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from pg_helpers import PG_URL, url_for_schema
from projection_helpers import rows

from gormes.events.notes import NoteAdded
from gormes.events.postgres import PostgresEventStore
from gormes.projections import ledger
from gormes.projections.runner import ProjectionRunner
from gormes.projections.streams import streams


def gormes(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gormes", "--db", url, "projections", *args],
        capture_output=True, text=True, timeout=120,
    )


async def test_status_and_rebuild_on_postgres(store, backend):
    if backend != "postgres":
        return  # one server-side case; SQLite has its own CLI tests
    url = url_for_schema(store.schema)
    for i in range(10):
        await store.append(f"job-{i % 3}", [NoteAdded(text=f"n{i}")])
    await ProjectionRunner(store, streams).catch_up(upto=6)

    done = gormes(url, "status", "--json")
    assert done.returncode == 0, done.stderr
    by_name = {s["name"]: s for s in json.loads(done.stdout)}
    assert by_name["memory"]["state"] == "not built"  # on PostgreSQL too
    assert (by_name["streams"]["position"], by_name["streams"]["lag"]) == (6, 4)
    assert by_name["streams"]["state"] == "behind"
    assert by_name["runs"]["state"] == "not built"
    table = gormes(url, "status")
    assert "SQLite only" not in table.stdout

    done = gormes(url, "rebuild", "streams", "runs", "--json")
    assert done.returncode == 0, done.stderr
    assert [(r["name"], r["position"]) for r in json.loads(done.stdout)] == [
        ("streams", 11), ("runs", 11),  # 11: the rebuild's `started` record (decision 0062)
    ]
    rebuilt = await rows(store, "SELECT * FROM streams ORDER BY stream")
    assert [r[2] for r in rebuilt if r[0].startswith("job-")] == [4, 3, 3]  # every note counted once
    async with PostgresEventStore.open(PG_URL, schema=store.schema) as other:
        again = ProjectionRunner(other, streams)
        await again.prepare()
        assert again.position == 11  # the CLI's rebuild is tracked
        await again.rebuild(upto=11)  # 12: the rebuild's outcome record (decision 0019)
    assert await rows(store, "SELECT * FROM streams ORDER BY stream") == rebuilt

    # Everything, ledger and memory included.
    done = gormes(url, "rebuild")
    assert done.returncode == 0, done.stderr
    assert "SQLite only" not in done.stderr
    # 11, 12: the first rebuild's audit records; 13: this one's `started`
    assert "memory: rebuilt (version 2) up to position 13" in done.stdout
    assert f"ledger: rebuilt (version {ledger.VERSION}) up to position 13" in done.stdout  # 3: stall deaths reworded, 4: keys



async def test_check_on_postgres_compares_a_rebuild_in_a_scratch_schema(store, backend):
    """`rebuild --check` on PostgreSQL: identical, then a tampered and a deleted row
    found (exit 1), a projection that is behind compared at its own position, the
    job ledger and memory checked too; the live schema is not written and the
    scratch schema is gone afterwards."""
    if backend != "postgres":
        return
    from pg_helpers import admin

    from gormes.actors.jobs.queue import JobQueue

    url = url_for_schema(store.schema)
    queue = await JobQueue.open(store)
    for i in range(3):
        await queue.submit("echo", {"i": i})
    for i in range(10):
        await store.append(f"note-{i % 3}", [NoteAdded(text=f"n{i}")])
    assert gormes(url, "rebuild").returncode == 0
    await store.append("note-9", [NoteAdded(text="after")])  # streams is now behind

    def schemas() -> set[str]:
        return {name for (name,) in admin("SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", ("gormes_check_%",))}

    before = schemas()
    clean = gormes(url, "rebuild", "--check", "--json")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    results = {r["name"]: r for r in json.loads(clean.stdout)}
    # 14: the rebuild's `started` record (decision 0062), 15: its outcome record, 16: the note after
    assert results["streams"]["state"] == "identical" and results["streams"]["position"] == 14
    assert results["ledger"]["state"] == "identical" and results["ledger"]["position"] == 16
    assert results["memory"]["state"] == "identical"
    assert results["runs"]["state"] == "identical"

    live = f'"{store.schema}"'
    admin(f"UPDATE {live}.streams SET version = 99 WHERE stream = 'note-1'")
    admin(f"DELETE FROM {live}.jobs WHERE id = (SELECT min(id) FROM {live}.jobs)")
    dirty = gormes(url, "rebuild", "streams", "ledger", "--check", "--json")
    assert dirty.returncode == 1, dirty.stdout + dirty.stderr
    results = {r["name"]: r for r in json.loads(dirty.stdout)}
    streams_diff = {(d["kind"], d["row"]["stream"], d["row"]["version"]) for d in results["streams"]["differences"]}
    assert streams_diff == {("missing", "note-1", 3), ("unexpected", "note-1", 99)}
    assert [(d["table"], d["kind"]) for d in results["ledger"]["differences"]] == [("jobs", "missing")]
    human = gormes(url, "rebuild", "streams", "--check")
    assert human.returncode == 1 and "streams: DIFFERS" in human.stdout and "'version': 99" in human.stdout
    # the live schema was only read; no scratch schema is left behind
    assert await rows(store, "SELECT version FROM streams WHERE stream = 'note-1'") == [(99,)]
    assert schemas() == before

    repaired = gormes(url, "rebuild", "streams", "ledger")
    assert repaired.returncode == 0, repaired.stderr
    assert gormes(url, "rebuild", "--check").returncode == 0
