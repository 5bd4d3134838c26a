"""The doctor on PostgreSQL, against the real server (a fresh schema per test).

The same unhealthy history (stalled, dead and waiting jobs, a crashed worker, a
circuit-breaker kill, unreplayable runs, an extraction backlog, failed memory
calls) is written to an SQLite file and to a Postgres schema through the real
stores; every check that runs on both must then say exactly the same thing.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import psycopg
import pytest
from doctor_helpers import T0, check, doctor
from pg_helpers import PG_URL, admin, backend_store, fresh_schema, url_for_schema

from gormes.actors.jobs.governor import BREAKER_ERROR
from gormes.actors.jobs.heartbeat import Heartbeat
from gormes.actors.jobs.queue import JobQueue
from gormes.control.call_rate import GatewayCallRate, parse_call_rate
from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.memory import Origin, Provenance, evidence_hash, fact_id
from gormes.events.memory import MemoryFactRecorded as Fact
from gormes.events.jobs import Tokens
from gormes.events.runs import RunCancelled, RunClockRead, RunCompleted, RunLlmCut, RunStarted
from gormes.events.sql_fragments import glob
from gormes.health import Check, Thresholds, module_exists, ok
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, CallRateLimited
from gormes.tools.builtin import default_registry

SQLITE_ONLY = {"store.wal", "store.integrity", "disk.free", "store.size"}
POSTGRES_ONLY = {"store.server", "disk.database_size", "store.retention"}
SCOPE = "project:default"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _started(run_id: str, handler: str = "agent") -> RunStarted:
    return RunStarted(run_id=run_id, handler=handler, handler_version="x")


def _fact(run_id: str, kind: str, text: str) -> Fact:
    provenance = Provenance(origin=Origin(run_id=run_id), kind=kind, scope=SCOPE, first_seen=T0,
                            last_seen=T0, evidence_hash=evidence_hash(text))
    return Fact(fact_id=fact_id(SCOPE, text), text=text, provenance=provenance, review_state="trusted")


def _audit(operation: str, outcome: str, at_s: float) -> OperationAudited:
    return OperationAudited(operation=operation, audit_kind="memory.write", caller="operator",
                            trust="operator", allowed=True, outcome=outcome, error="boom",
                            duration_ms=5.0, at=int(at_s * 1000))


async def _unhealthy_history(store, clock: Clock) -> None:
    clock.now = T0 - 3600
    await Heartbeat(store, "w-old", {"pid": 1, "queues": None, "names": ["echo"]}).beat()
    queue = await JobQueue.open(store, clock=clock)
    await queue.submit("echo", {})
    await queue.claim({"echo"}, worker_id="w-old", lease_ms=1000)  # stalled
    await queue.submit("echo", {}, {"queue": "mail"})
    job = await queue.claim({"echo"}, queues=["mail"], worker_id="w-old")
    await queue.fail(job.id, job.lock_token, "bad input", unrecoverable=True)  # dead
    await queue.submit("echo", {}, {"queue": "mem"})
    job = await queue.claim({"echo"}, queues=["mem"], worker_id="w-old")
    await queue.fail(job.id, job.lock_token, BREAKER_ERROR, unrecoverable=True)  # breaker
    clock.now = T0 - 600
    for _ in range(3):
        await queue.submit("resize", {}, {"queue": "bulk"})  # waiting, nobody serves it
    await store.append("run-ok", [_started("ok"), RunClockRead(seq=1, value=1.0), RunCompleted()])
    await store.append("run-gap", [_started("gap"), RunClockRead(seq=1, value=1.0),
                                   RunClockRead(seq=3, value=2.0)])
    await store.append("run-nohandler", [_started("nohandler", handler="who.knows")])
    await store.append("run-headless", [RunClockRead(seq=1, value=1.0)])
    await store.append("run-late", [_started("late"), RunCompleted()])  # not extracted
    await store.append("run-cut", [_started("cut"), RunLlmCut(at_seq=1, request_hash="h", model="m",  # billed, unread
                                                              usage=Tokens(input=40, output=1)),
                                   RunCancelled(reason="deadline")])
    await store.append("memory-" + SCOPE, [_fact("ok", "extracted", "Ada works at the lab"),
                                           _fact("gap", "manual", "Bob likes tea")])
    await store.append(audit_stream(int(T0 * 1000)), [
        _audit("memory.extract", "error", T0 - 3600), _audit("memory.recall", "timeout", T0 - 60),
        _audit("memory.extract", "error", T0 - 2 * 86400), _audit("time.now", "error", T0 - 60),
    ])
    rule = parse_call_rate("1req/60s")  # a gateway past its call rate: two calls refused
    assert rule is not None
    gateway = Executor(default_registry(), store, clock=clock, call_limit=GatewayCallRate(store, rule, clock=clock))
    for _ in range(3):
        try:
            await gateway.call("time.now", {}, Caller(trust="gateway", id="mcp:bot"))
        except CallRateLimited:
            pass


def _ids(result) -> tuple[str, str, str]:
    def hide(text: str) -> str:
        return re.sub(r"\b[0-9A-Z]{26}\b", "<id>", text)

    return result.status, hide(result.message), hide(result.remediation)


def _run(target, **kwargs):
    return doctor(target, now=T0, modules=module_exists,
                  thresholds=Thresholds(projection_lag_warn=5), **kwargs)


async def test_every_shared_check_says_the_same_on_postgres_as_on_sqlite(db_path: Path):
    reports = {}
    for backend in ("sqlite", "postgres"):
        clock = Clock(T0)
        async with backend_store(backend, db_path, clock=clock) as store:
            await _unhealthy_history(store, clock)
            target = db_path if backend == "sqlite" else url_for_schema(store.schema)
            reports[backend] = _run(target)
    lite, pg = reports["sqlite"], reports["postgres"]
    lite_checks = {c.name: c for c in lite.checks}
    pg_checks = {c.name: c for c in pg.checks}
    shared = set(lite_checks) - SQLITE_ONLY - {"store.schema"}
    assert set(pg_checks) == shared | POSTGRES_ONLY | {"store.schema"}
    for name in sorted(shared):  # job ids are random: compared as <id>
        assert _ids(pg_checks[name]) == _ids(lite_checks[name]), name
    # the history is unhealthy where it should be, so the comparison means something
    expected = {
        "queue.stalled": "warn", "queue.dead_letters": "warn", "queue.wedged": "fail",
        "workers.heartbeats": "warn", "workers.circuit_breaker": "warn", "replay.runs": "warn",
        "memory.extraction": "warn", "memory.dead_letters": "warn", "projections.lag": "warn",
        "gateway.call_rate": "warn", "runs.cut_turns": "warn",
    }
    assert {name: pg_checks[name].status for name in expected} == expected
    assert "2 memory operation call(s) failed" in pg_checks["memory.dead_letters"].message
    assert pg_checks["gateway.call_rate"].message.startswith("2 gateway call(s) refused by the call rate")
    assert pg_checks["replay.runs"].message.startswith("3 run(s) cannot be replayed exactly")
    assert pg_checks["runs.cut_turns"].message.startswith("1 model turn(s) cut short before their replies "
                                                          "were read in the last 7 days, 41 tokens billed")
    assert "1 completed run(s) not extracted into memory, the oldest (late)" in \
        pg_checks["memory.extraction"].message
    assert pg.status == lite.status == "error"
    assert pg_checks["store.schema"].status == "ok"
    assert "schema version 1" in pg_checks["store.schema"].message
    # the SQLite-only checks are skipped on PostgreSQL, each with its reason
    skipped = {s.name: s.reason for s in pg.skipped}
    assert set(skipped) == SQLITE_ONLY
    assert all(reason.startswith("not on PostgreSQL: ") for reason in skipped.values())
    assert "pg_amcheck" in skipped["store.integrity"]
    assert lite.skipped == []


async def test_server_and_size_are_measured(db_path: Path):
    async with backend_store("postgres", db_path) as store:
        await store.append("notes-1", [_fact("r", "manual", "x" * 100_000)])
        report = _run(url_for_schema(store.schema), offline=True)
    server = check(report, "store.server")
    version = admin("SHOW server_version")[0][0]
    assert server.status == "ok" and f"PostgreSQL {version}, primary, fsync on" in server.message
    size = check(report, "disk.database_size")
    assert size.status == "ok" and f"schema {store.schema} " in size.message
    assert "cannot be seen from a client" in size.message


def test_an_empty_schema_warns_and_skips_what_needs_the_database():
    with fresh_schema() as schema:
        report = _run(url_for_schema(schema))
        tables = admin("SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
                       (schema,))[0][0]
    gate = check(report, "store.schema")
    assert gate.status == "warn" and "is empty: no gormes schema yet" in gate.message
    assert tables == 0  # the doctor created nothing
    reasons = {s.name: s.reason for s in report.skipped}
    assert reasons["store.positions"] == "the database cannot be read (store.schema)"
    assert reasons["store.server"] == "the database cannot be read (store.schema)"


def test_another_applications_schema_and_an_unreachable_server_fail():
    with fresh_schema() as schema:
        admin(f'CREATE TABLE "{schema}".orders(id int)')
        foreign = check(_run(url_for_schema(schema)), "store.schema")
    assert foreign.status == "fail" and "holds tables of another application (orders)" in foreign.message
    report = _run("postgresql://gormes:secret@127.0.0.1:1/none")
    gate = check(report, "store.schema")
    assert gate.status == "fail" and gate.message.startswith("cannot connect to PostgreSQL at ")
    assert "secret" not in gate.message and "gormes:***@" in report.database
    assert report.status == "error"


async def test_the_session_is_read_only_and_a_failed_check_does_not_poison_the_next(db_path: Path):
    def write(ctx):
        ctx.db.execute("CREATE TABLE doctor_wrote(a int)")
        return ok("wrote")

    def abort_a_transaction(ctx):
        ctx.db.execute("BEGIN")
        ctx.db.execute("SELECT 1 / 0")
        return ok("unreachable")

    def read(ctx):
        return ok(f"{ctx.db.execute('SELECT count(*) FROM events').fetchone()[0]} events")

    async with backend_store("postgres", db_path) as store:
        await store.append("notes-1", [_fact("r", "manual", "x")])
        report = _run(url_for_schema(store.schema), checks=[
            Check(name="t.write", category="store", run=write),
            Check(name="t.abort", category="store", run=abort_a_transaction),
            Check(name="t.read", category="store", run=read),
        ])
        wrote = admin("SELECT to_regclass(%s)", (f'"{store.schema}".doctor_wrote',))[0][0]
    assert wrote is None
    refused = check(report, "t.write")
    assert refused.status == "fail" and "read-only transaction" in refused.message
    assert check(report, "t.abort").status == "fail"
    assert check(report, "t.read").message == "1 events"


def test_glob_on_postgres_matches_as_sqlite_glob_does():
    import sqlite3

    from gormes.events.postgres_sql import PortableConnection

    names = ["memory.fact", "memory", "memoryX.a", "run-1", "run-", "Run-1", "a.b", "axb", "job.x.y",
             "skill.used", "skills.routed", "50%", "it's"]
    patterns = ["memory.*", "run-*", "skill*.*", "a.b", "?.?", "[jr]*", "[^m]*", "*%", "it's"]
    lite = sqlite3.connect(":memory:")
    with psycopg.connect(PG_URL, autocommit=True) as raw:
        pg = PortableConnection(raw)
        for pattern in patterns:
            for name in names:
                want = bool(lite.execute(f"SELECT ? AS type WHERE {glob(lite, 'type', pattern)}",
                                         (name,)).fetchone())
                got = bool(pg.execute(f"SELECT 1 FROM (SELECT ?::text AS type) AS t "
                                      f"WHERE {glob(pg, 'type', pattern)}", (name,)).fetchone())
                assert got == want, (pattern, name)


def test_the_cli_prints_the_same_json_shape_and_exits_1_on_a_gap(tmp_path: Path):
    from cli_helpers import cli_env, gormes_command

    with fresh_schema() as schema:
        url = url_for_schema(schema)

        def run(*args: str) -> tuple[int, dict]:
            done = subprocess.run(gormes_command(url, "doctor", "--json", *args), capture_output=True,
                                  text=True, env=cli_env(), cwd=tmp_path, timeout=60)
            assert "Traceback" not in done.stderr, done.stderr
            return done.returncode, json.loads(done.stdout)

        for text in ("a", "b", "c"):
            subprocess.run(gormes_command(url, "append", "notes-1", "note.added", "--data",
                                          json.dumps({"text": text})),
                           check=True, capture_output=True, env=cli_env(), cwd=tmp_path)
        code, report = run("--offline")
        assert code == 0 and report["status"] in ("ok", "warnings")
        assert set(report) == {"schema_version", "status", "database", "offline", "checked_at",
                               "checks", "skipped"}
        assert {s["name"] for s in report["skipped"]} == SQLITE_ONLY | {
            "projections.lag", "queue.wedged", "workers.heartbeats", "workers.governor"}
        assert next(c for c in report["checks"] if c["name"] == "store.positions")["status"] == "ok"

        # the first run kept its summary in the schema (decision 0084): a note deleted
        # below its position is not seen by the next run, only by --full (an audit
        # record would be: the audit chain's last day is verified again every run)
        head = admin(f'SELECT max(position) FROM "{schema}".events')
        assert admin(f'SELECT position FROM "{schema}".doctor_scan') == head
        [(gap,)] = admin(f'SELECT position FROM "{schema}".events WHERE stream = %s AND version = 2',
                         ("notes-1",))
        admin(f'DELETE FROM "{schema}".events WHERE position = %s', (gap,))
        code, report = run("--offline")
        assert code == 0, [c for c in report["checks"] if c["status"] == "fail"]
        assert next(c for c in report["checks"] if c["name"] == "store.positions")["status"] == "ok"
        code, report = run("--offline", "--full")
        assert code == 1 and report["status"] == "error"
        positions = next(c for c in report["checks"] if c["name"] == "store.positions")
        assert positions["status"] == "fail" and f"1 position(s) missing from the log: {gap}" in positions["message"]

        human = subprocess.run(gormes_command(url, "doctor", "--offline", "--full"), capture_output=True,
                               text=True, env=cli_env(), cwd=tmp_path, timeout=60)
        assert human.returncode == 1
        assert "skip  store.wal" in human.stdout and "FAIL  store.positions" in human.stdout
    assert list(tmp_path.iterdir()) == []  # no SQLite file was made


@pytest.fixture(autouse=True)
def _acceptance_helpers_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "acceptance"))
