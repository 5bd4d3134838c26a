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
        ("streams", 10), ("runs", 10),
    ]
    rebuilt = await rows(store, "SELECT * FROM streams ORDER BY stream")
    assert [r[2] for r in rebuilt] == [4, 3, 3]  # every note counted once
    async with PostgresEventStore.open(PG_URL, schema=store.schema) as other:
        again = ProjectionRunner(other, streams)
        await again.prepare()
        assert again.position == 10  # the CLI's rebuild is tracked
        await again.rebuild()
    assert await rows(store, "SELECT * FROM streams ORDER BY stream") == rebuilt

    # Everything, ledger and memory included.
    done = gormes(url, "rebuild")
    assert done.returncode == 0, done.stderr
    assert "SQLite only" not in done.stderr
    assert "memory: rebuilt (version 1) up to position 10" in done.stdout
    assert "ledger: rebuilt (version 1) up to position 10" in done.stdout

    for args, message in (
        (("rebuild", "--check"), "--check needs an SQLite database"),
    ):
        done = gormes(url, *args)
        assert done.returncode == 2  # a UserError
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("gormes: error: ") and message in line
