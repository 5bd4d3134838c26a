"""The open calls' index (decision 0067 and its addendum): `gormes audit
unfinished` and the doctor read as many rows as there are open calls, on SQLite
and PostgreSQL. A log an older gormes wrote (started records, no index) is
answered from the log by a read-only reader, and indexed once, from the log,
before the first write-ahead record a writing gormes seals; from then on each
write-ahead record's seal keeps it, and an import that copies records in builds
it again. An ordinary audit record does not touch it. A build that fails is
tried again by one later write-ahead call; a reader that scans the log instead
of reading the index says so."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

import msgspec
import trio
from cli_helpers import json_lines, run_gormes
from pg_helpers import backend, store_on_both_backends, url_for_schema  # noqa: F401 - fixtures

from gormes.audit_unfinished import open_calls
from gormes.events import audit_open
from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.audit_chain import INDEX_RETRY_S, append_sealed, verify_chains
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


# -- a build that fails is tried again; a read that scans says so ---------------------


async def write_ahead_calls(store: Any, count: int) -> list[int]:
    """`count` write-ahead calls' `started` records sealed at once, as many runs'
    first calls are; their positions."""
    positions: list[int] = []

    async def one() -> None:
        [result] = await append_sealed(store, AppendRequest(audit_stream(AT), [call("started")]))
        positions.append(result.first_position)

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)
    return sorted(positions)


def index_rows(conn: Any) -> list[int]:
    return sorted(p for (p,) in conn.execute(f"SELECT position FROM {audit_open.TABLE}"))


async def test_a_build_that_fails_is_tried_again_by_one_later_call_and_then_used(store, mock_clock, monkeypatch, caplog):
    tries: list[str] = []
    build = audit_open.ensure

    def busy_once(conn: Any) -> bool:
        tries.append("build")
        if len(tries) == 1:
            raise RuntimeError("database is locked (injected)")  # a busy database, a lock timeout
        return build(conn)

    monkeypatch.setattr(audit_open, "ensure", busy_once)
    with caplog.at_level(logging.WARNING, logger="gormes.audit"):
        first = await write_ahead_calls(store, 10)
    assert tries == ["build"]  # one build for the ten, which failed: the records are taken all the same
    [warned] = [r.getMessage() for r in caplog.records if r.name == "gormes.audit"]  # said once, not ten times
    assert "could not be built (RuntimeError: database is locked (injected)); tried again in 1 s" in warned
    assert not await store.read_sql(audit_open.current)
    assert await listed(store) == first
    # until the wait is over, the calls go on without trying again
    during = await write_ahead_calls(store, 3)
    assert tries == ["build"]

    mock_clock.jump(INDEX_RETRY_S[0])
    after = await write_ahead_calls(store, 10)
    assert tries == ["build", "build"]  # tried again, by one call of the ten
    assert await store.read_sql(audit_open.current)
    assert await store.read_sql(index_rows) == sorted(first + during + after)
    more = await write_ahead_calls(store, 2)
    assert tries == ["build", "build"]
    # the readers read the index, and say nothing of a scan
    done = run_gormes(db_of(store), "audit", "unfinished", "--json")
    assert done.returncode == 0, done.stderr
    assert [r["position"] for r in json_lines(done.stdout)] == sorted(first + during + after + more)
    assert done.stderr == ""


def doctor_check(store: Any, name: str) -> dict[str, Any]:
    done = run_gormes(db_of(store), "doctor", "--json", "--offline")
    [check] = [c for c in json.loads(done.stdout)["checks"] if c["name"] == name]
    return check


async def test_the_doctor_and_audit_unfinished_say_when_they_scanned_the_log(store):
    # a log with no write-ahead call: the scan read nothing, which the doctor mentions
    empty = doctor_check(store, "audit.unfinished")
    assert empty["status"] == "ok"
    assert "read by scanning 0 write-ahead record(s) of the log: the open calls' index is not built" in empty["message"]

    # an older gormes's write-ahead calls, no index: the doctor warns that it scanned
    now_ms = int(time.time() * 1000)
    started = await append_unindexed(store, call("started", at=now_ms - 60_000))
    await append_unindexed(store, call("ok", started_position=started, at=now_ms - 59_000))
    still = await append_unindexed(store, call("started", at=now_ms - 1000))  # may still run: not stale
    scanned = doctor_check(store, "audit.unfinished")
    assert scanned["status"] == "warn"
    assert scanned["message"] == (
        "every write-ahead call of the last 7 days has its outcome recorded, but read by scanning"
        " 3 write-ahead record(s) of the log: the open calls' index is not built")
    assert scanned["remediation"].startswith("the next write-ahead call (shell.run, ")
    text = run_gormes(db_of(store), "audit", "unfinished")
    as_json = run_gormes(db_of(store), "audit", "unfinished", "--json")
    for done in (text, as_json):
        assert done.returncode == 0, done.stderr
        [note] = done.stderr.splitlines()
        assert note.startswith("gormes: note: read by scanning 3 write-ahead record(s) of the log:"
                               " the open calls' index is not built; the next write-ahead call"), note
    assert [r["position"] for r in json_lines(as_json.stdout)] == [still]  # stdout: the records alone
    assert text.stdout.splitlines()[0].endswith(f"position {still}: started, no outcome recorded")

    # built by the next write-ahead call: read from the index, and nothing said
    await append_sealed(store, AppendRequest(audit_stream(now_ms), [call("ok", started_position=still, at=now_ms)]))
    await append_sealed(store, AppendRequest(audit_stream(now_ms), [call("started", at=now_ms)]))
    indexed = doctor_check(store, "audit.unfinished")
    assert indexed == {**indexed, "status": "ok",
                       "message": "every write-ahead call of the last 7 days has its outcome recorded"}
    done = run_gormes(db_of(store), "audit", "unfinished", "--json")
    assert done.returncode == 0 and done.stderr == "", done.stderr
