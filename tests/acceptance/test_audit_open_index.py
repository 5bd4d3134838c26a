"""The open calls' index (decision 0067 and its addendum): `gormes audit
unfinished` and the doctor read as many rows as there are open calls, on SQLite
and PostgreSQL. A log an older gormes wrote (started records, no index) is
answered from the log by a read-only reader, and indexed once, from the log,
before the first write-ahead record a writing gormes seals; from then on each
write-ahead record's seal keeps it, and an import that copies records in builds
it again. An ordinary audit record does not touch it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import msgspec
from cli_helpers import json_lines, run_gormes
from pg_helpers import backend, store_on_both_backends, url_for_schema  # noqa: F401 - fixtures

from gormes.audit_unfinished import open_calls
from gormes.events import audit_open
from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.audit_chain import append_sealed, verify_chains
from gormes.events.codec import default_codec
from gormes.events.sqlite import SQLiteEventStore
from gormes.events.store import AppendRequest

AT = 1_796_000_000_000  # ms since the epoch


def call(outcome: str, started_position: int | None = None, at: int = AT) -> OperationAudited:
    return OperationAudited(
        operation="shell.run", audit_kind="shell.exec", caller="cli", trust="operator", allowed=True,
        outcome=outcome, duration_ms=0.0, mutating=True, at=at, started_position=started_position,
    )


async def append_unindexed(store: Any, event: OperationAudited) -> int:
    """Append as a gormes before the index did (no seal, no index made)."""
    return (await store.append(audit_stream(event.at), [event])).first_position


async def listed(store: Any) -> list[int]:
    return await store.read_sql(lambda conn: [r.position for r in open_calls(conn, default_codec)])


def db_of(store: Any) -> Path | str:
    return store.path if store.dialect == "sqlite" else url_for_schema(store.schema)


def cli_listed(store: Any) -> list[int]:
    done = run_gormes(db_of(store), "audit", "unfinished", "--json")
    assert done.returncode == 0, done.stderr
    return [r["position"] for r in json_lines(done.stdout)]


async def test_an_old_log_is_indexed_once_then_kept_by_the_seals(store):
    first = await append_unindexed(store, call("started"))
    second = await append_unindexed(store, call("started"))
    await append_unindexed(store, call("ok", started_position=first))
    third = await append_unindexed(store, call("started"))
    assert not await store.read_sql(audit_open.current)
    # No index yet: read-only readers pair the log's records, as before.
    assert await listed(store) == [second, third]
    assert cli_listed(store) == [second, third]

    # An ordinary record (a refusal) makes no index: only a write-ahead call needs one.
    refusal = msgspec.structs.replace(call("denied"), allowed=False, mutating=False)
    await append_sealed(store, AppendRequest(audit_stream(AT), [refusal]))
    assert not await store.read_sql(audit_open.current)

    # This gormes's first write-ahead record: the index, built from the log, then its own row.
    [fourth] = [r.first_position for r in await append_sealed(store, AppendRequest(audit_stream(AT), [call("started")]))]
    assert await store.read_sql(audit_open.current)
    assert await store.read_sql(lambda c: sorted(p for (p,) in c.execute(f"SELECT position FROM {audit_open.TABLE}")))\
        == [second, third, fourth]

    # The outcome's seal closes its call; an ordinary record changes nothing.
    await append_sealed(store, AppendRequest(audit_stream(AT), [call("error", started_position=second)]))
    await append_sealed(store, AppendRequest(audit_stream(AT), [refusal]))
    assert await listed(store) == [third, fourth]
    assert cli_listed(store) == [third, fourth]

    # What is listed is the index's rows, not a pass over the log.
    await store.transact(lambda tx: tx.execute(f"DELETE FROM {audit_open.TABLE} WHERE position = ?", (fourth,)))
    assert await listed(store) == [third]


async def test_an_import_of_records_builds_the_index_again(store, tmp_path: Path):
    await append_sealed(store, AppendRequest(audit_stream(AT), [call("started")]))
    started = await listed(store)
    # a line of another log: a write-ahead call started there and never finished
    line = {"stream": audit_stream(AT + 1), "type": "audit.operation",
            "data": msgspec.to_builtins(call("started", at=AT + 1))}
    source = tmp_path / "other.jsonl"
    source.write_text(msgspec.json.encode(line).decode() + "\n")
    done = run_gormes(db_of(store), "import", str(source))
    assert done.returncode == 0, done.stderr
    imported = await listed(store)
    assert imported[:1] == started and len(imported) == 2
    assert imported == cli_listed(store)


async def test_since_keeps_its_meaning_with_the_index(store):
    early = await append_unindexed(store, call("started", at=AT))
    await append_sealed(store, AppendRequest(audit_stream(AT), [call("started", at=AT + 86_400_000)]))
    late = await listed(store)
    assert late[0] == early and len(late) == 2
    assert await store.read_sql(lambda c: [r.position for r in open_calls(c, default_codec, AT + 1)]) == late[1:]


async def test_an_index_built_by_other_rules_is_built_again(db_path: Path):
    async with SQLiteEventStore.open(db_path) as store:
        started = await append_unindexed(store, call("started"))
    conn = sqlite3.connect(db_path)
    with conn:  # what another version might have left: stale rows, its own trigger
        conn.execute("CREATE TABLE audit_open(position INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO audit_open VALUES (999)")
        conn.execute("CREATE TRIGGER audit_open_v0_started AFTER INSERT ON events BEGIN SELECT 1; END")
    conn.close()
    async with SQLiteEventStore.open(db_path) as store:
        assert not await store.read_sql(audit_open.current)
        await append_sealed(store, AppendRequest(audit_stream(AT), [call("started")]))
        assert await store.read_sql(audit_open.current)
        left = await store.read_sql(lambda c: sorted(
            (t, n) for (t, n) in c.execute("SELECT type, name FROM sqlite_master WHERE name LIKE 'audit_open%'")))
        assert left == [("table", audit_open.TABLE)]  # the other version's table and trigger dropped
        assert await listed(store) == [started, started + 1]
        assert all(day.intact for day in await store.read_sql(lambda c: verify_chains(c, default_codec)))


async def test_the_read_looks_up_the_open_calls_and_walks_no_log(db_path: Path):
    async with SQLiteEventStore.open(db_path) as store:
        await append_sealed(store, AppendRequest(audit_stream(AT), [call("started")]))
        plan = await store.read_sql(lambda c: c.execute("EXPLAIN QUERY PLAN " + audit_open.OPEN_ROWS).fetchall())
    steps = [step for (*_, step) in plan]
    assert steps == ["SCAN o", "SEARCH e USING INTEGER PRIMARY KEY (rowid=?)"], steps


async def test_on_postgresql_version_ones_trigger_function_and_table_are_dropped(db_path: Path):
    from pg_helpers import backend_store

    version_one = (
        "CREATE TABLE audit_open(position BIGINT PRIMARY KEY)",
        "CREATE FUNCTION audit_open_v1() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$",
        "CREATE TRIGGER audit_open_v1 AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION audit_open_v1()",
    )
    async with backend_store("postgres", db_path) as store:
        started = await append_unindexed(store, call("started"))
        for statement in version_one:
            await store.transact(lambda tx, statement=statement: tx.execute(statement))
        await append_sealed(store, AppendRequest(audit_stream(AT), [call("started")]))
        left = await store.read_sql(lambda c: sorted(
            [n for (n,) in c.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass('events')"
                                     " AND NOT tgisinternal")]
            + [n for (n,) in c.execute("SELECT p.proname FROM pg_proc p JOIN pg_namespace s"
                                       " ON s.oid = p.pronamespace WHERE s.nspname = current_schema()")]
            + [n for (n,) in c.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                                       " AND tablename LIKE 'audit_open%'")]))
        assert left == [audit_open.TABLE]
        assert await listed(store) == [started, started + 1]
