"""Retention on SQLite and PostgreSQL (decision 0029): the streams that ended before
the horizon (terminal or removed jobs with their runs, whole run trees, removed
cron schedules) are archived to a gzip segment with a manifest and deleted in one
transaction; what is kept keeps its positions; the projections equal a rebuild;
the segment imports back; a dry run writes nothing but its audit record."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

from gormes.actors.jobs.queue import JobQueue
from gormes.events.audit import OperationAudited
from gormes.events.catalog import load_all
from gormes.events.cron import CronFired, CronRemoved, CronScheduled
from gormes.events.jsonl import import_file_in
from gormes.events.notes import NoteAdded
from gormes.events.retention import RETENTION_STREAM, LogRetained
from gormes.events.runs import ForkOrigin, RunCompleted, RunStarted
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller
from gormes.projections.maintenance import rebuild_store
from gormes.projections.registry import all_projections
from gormes.projections.runner import ProjectionRunner
from gormes.tools.builtin import default_registry

from projection_helpers import rows

REPO = Path(__file__).resolve().parents[2]
SUBAGENTS = REPO / "replay_fixtures" / "subagents.jsonl"
OPERATOR = Caller(trust="operator", id="cli")


async def _job(queue: JobQueue, name: str, **options: Any) -> str:
    job = await queue.submit(name, {"n": name}, options)
    claimed = await queue.claim([name])
    assert claimed is not None and claimed.id == job.id
    await queue.complete(job.id, claimed.lock_token, {"done": name})
    return job.id


def _started(run_id: str, **kw: Any) -> RunStarted:
    return RunStarted(run_id=run_id, handler="agent", handler_version="v", **kw)


async def _build(store: Any) -> tuple[JobQueue, dict[str, str]]:
    """An old part (ended before the horizon) and a recent one; the names of interest."""
    load_all()
    queue = await JobQueue.open(store)
    names: dict[str, str] = {}
    names["done"] = await _job(queue, "old.done")
    names["removed"] = await _job(queue, "old.removed", remove_on_complete=True)
    waiting = await queue.submit("old.waiting", {})
    names["waiting"] = waiting.id
    # a run of the done job, ended: archived with it
    await store.append("run-of-done", [_started("of-done", job_id=names["done"]), RunCompleted(result=1)])
    # a whole subagent tree, ended
    await store.transact(lambda tx: import_file_in(tx, SUBAGENTS))
    # an ended run whose live fork keeps it
    await store.append("run-forked", [_started("forked"), RunCompleted(result=2)])
    await store.append("run-fork", [_started("fork", forked_from=ForkOrigin(run_id="forked", position=1))])
    # cron: a removed schedule goes, a live one with fires stays
    await store.append("cron-gone", [CronScheduled(name="gone", schedule="* * * * *", job="x", at=1),
                                     CronRemoved(at=2)])
    await store.append("cron-live", [CronScheduled(name="live", schedule="* * * * *", job="x", at=1),
                                     CronFired(fire_at=60_000, job_id="j", at=60_000)])
    await store.append("memory-project:x", [NoteAdded(text="stands in for a memory scope's stream")])
    await store.append("notes-a", [NoteAdded(text="kept")])
    return queue, names


async def _horizon(store: Any) -> float:
    [(at,)] = await rows(store, "SELECT max(recorded_at) FROM events")
    return float(at) + 0.5


async def _tables(store: Any) -> dict[str, list[tuple]]:
    out = {}
    for p in all_projections():
        if store.dialect == "postgres" and p.name not in {"ledger", "runs", "schedules", "streams", "memory", "skill_usage"}:
            continue
        for table in p.tables:
            if store.dialect == "postgres" and table.endswith("_fts"):
                continue  # PostgreSQL's full-text search is an index, not a table
            out[table] = sorted(await rows(store, f"SELECT * FROM {table}"), key=repr)
    return out


async def _catch_up_all(store: Any) -> None:
    for p in all_projections():
        if p.name != "ledger":
            await ProjectionRunner(store, p).catch_up()


async def test_retention_archives_what_ended_and_keeps_the_rest_in_place(store: Any, tmp_path: Path) -> None:
    queue, names = await _build(store)
    horizon = await _horizon(store)
    recent = await _job(queue, "new.done")  # ended after the horizon: kept
    await _catch_up_all(store)
    before = await rows(store, "SELECT position, stream, version, type, data FROM events ORDER BY position")
    head = before[-1][0]

    executor = Executor(default_registry(), store, clock=lambda: horizon + 3600)
    archive = tmp_path / "archive"
    dry = await executor.call("log.retain", {"older_than_s": 3600, "dry_run": True, "archive": str(archive)}, OPERATOR)
    assert dry.dry_run and dry.segment is None and not archive.exists()
    after_dry = await rows(store, "SELECT position, stream, version, type, data FROM events ORDER BY position")
    assert after_dry[: len(before)] == before and [r[3] for r in after_dry[len(before):]] == ["audit.operation"]

    done = await executor.call("log.retain", {"older_than_s": 3600, "archive": str(archive)}, OPERATOR)
    archived = {"job-" + names["done"], "job-" + names["removed"], "run-of-done",
                "run-subagents-1", "run-subagents-2", "run-subagents-3", "cron-gone"}
    assert (done.streams, done.kinds) == (len(archived), {"cron": 1, "job": 2, "run": 4})
    assert (done.events, dry.events, dry.streams) == (sum(1 for r in before if r[1] in archived), done.events, done.streams)

    # the segment: gzip JSONL of exactly the archived events, in position order; the manifest matches it
    segment = Path(done.segment)
    lines = [json.loads(line) for line in gzip.decompress(segment.read_bytes()).splitlines()]
    assert [(x["position"], x["stream"], x["version"], x["type"]) for x in lines] == \
        [r[:4] for r in before if r[1] in archived]
    manifest = json.loads(Path(done.manifest).read_text())
    assert manifest["sha256"] == hashlib.sha256(segment.read_bytes()).hexdigest() == done.sha256
    assert (manifest["events"], manifest["streams"]) == (len(lines), len(archived))
    assert (manifest["first_position"], manifest["last_position"]) == (lines[0]["position"], lines[-1]["position"])

    # what stays keeps its positions, versions and data; the record goes after the old head
    now = await rows(store, "SELECT position, stream, version, type, data FROM events ORDER BY position")
    assert [r for r in now if r[0] <= head] == [r for r in before if r[1] not in archived]
    kept = {r[1] for r in now}
    assert {"job-" + names["waiting"], "job-" + recent, "run-forked", "run-fork", "cron-live",
            "memory-project:x", "notes-a"} <= kept and not kept & archived
    [retained] = [r for r in await store.read_stream(RETENTION_STREAM)]
    assert isinstance(retained.event, LogRetained) and retained.position > head
    assert retained.event.manifest.sha256 == done.sha256
    audit = [r.event for r in await store.read_all() if isinstance(r.event, OperationAudited)]
    assert [(a.operation, a.trust, a.outcome) for a in audit] == [("log.retain", "operator", "ok")] * 2

    # the ledger no longer holds the archived jobs; every projection equals its rebuild
    ids = {r[0] for r in await rows(store, "SELECT id FROM jobs")}
    assert ids == {names["waiting"], recent}
    assert set(done.projections) >= {"ledger", "runs", "schedules", "streams"}
    await _catch_up_all(store)  # the retention's own audit record, appended after it
    live = await _tables(store)
    await rebuild_store(store, [p for p in all_projections() if store.dialect != "postgres" or p.name in
                                {"ledger", "runs", "schedules", "streams", "memory", "skill_usage"}])
    assert await _tables(store) == live

    # a retention again finds nothing more; a new stream after it gets a fresh position
    again = await executor.call("log.retain", {"older_than_s": 3600, "archive": str(archive)}, OPERATOR)
    assert (again.streams, again.segment) == (0, None)
    result = await store.append("notes-b", [NoteAdded(text="after")])
    assert result.first_position > retained.position


async def test_an_archived_segment_imports_back_with_its_streams_and_versions(store: Any, tmp_path: Path,
                                                                                reopen: Any) -> None:
    await _build(store)
    horizon = await _horizon(store)
    before = await rows(store, "SELECT stream, version, type, data FROM events ORDER BY position")
    executor = Executor(default_registry(), store, clock=lambda: horizon + 10)
    done = await executor.call("log.retain", {"older_than_s": 10, "archive": str(tmp_path / "a")}, OPERATOR)
    assert done.streams == 7
    got = await store.transact(lambda tx: import_file_in(tx, done.segment))
    assert got.imported == done.events
    back = await rows(store, "SELECT stream, version, type, data FROM events ORDER BY position")
    archived = [r for r in before if r[0] in {x[0] for x in back[-done.events:]}]
    assert back[-done.events:] == archived  # the same streams, versions and data, at new positions


async def test_a_stream_deleted_by_retention_starts_again_at_version_one(store: Any, tmp_path: Path) -> None:
    load_all()
    await store.append("cron-again", [CronScheduled(name="again", schedule="* * * * *", job="x", at=1),
                                      CronRemoved(at=2)])
    horizon = await _horizon(store)
    executor = Executor(default_registry(), store, clock=lambda: horizon + 1)
    done = await executor.call("log.retain", {"older_than_s": 1, "archive": str(tmp_path / "a")}, OPERATOR)
    assert done.kinds == {"cron": 1}
    assert await store.stream_version("cron-again") == 0
    added = await store.append("cron-again", [CronScheduled(name="again", schedule="* * * * *", job="x", at=9)],
                               expected_version=0)
    assert added.version == 1


async def test_a_nul_character_in_job_data_does_not_block_retention(store: Any, tmp_path: Path) -> None:
    """JSON may carry U+0000 (`\\u0000`), which PostgreSQL's text cannot: a job whose
    data or result holds one is archived like any other."""
    load_all()
    queue = await JobQueue.open(store)
    job = await queue.submit("nul", {"text": "a\x00b"})
    claimed = await queue.claim(["nul"])
    assert claimed is not None
    await queue.complete(job.id, claimed.lock_token, {"out": "\x00"})
    horizon = await _horizon(store)
    executor = Executor(default_registry(), store, clock=lambda: horizon + 10)
    done = await executor.call("log.retain", {"older_than_s": 10, "archive": str(tmp_path / "a")}, OPERATOR)
    assert (done.streams, done.kinds) == (1, {"job": 1})
    lines = [json.loads(line) for line in gzip.decompress(Path(done.segment).read_bytes()).splitlines()]
    assert lines[0]["data"]["data"] == {"text": "a\x00b"}
