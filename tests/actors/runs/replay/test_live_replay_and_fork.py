"""Replay of runs recorded here against a real database: no side effects, --until,
the JSONL round trip, and fork (copy a prefix, continue live, replay the fork)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import changed_handlers as changed
import pytest

from gormes.actors.runs.continuation import ForkRefused, fork_run
from gormes.actors.runs.replay import replay
from gormes.actors.runs.recorded import DatabaseRuns, FileRuns
from gormes.actors.runs.manager import RunManager
from gormes.events.jsonl import import_lines, open_for_reading, parse_lines
from gormes.events.run_export import export_run
from gormes.events.runs import RunStarted, run_stream
from gormes.events.sqlite_log import SQLiteLog
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def write_script(path: Path, *agents: dict) -> str:
    path.write_text(json.dumps({"model": "scripted", "agents": list(agents)}))
    return f"scripted:{path}"


PARENT = {"replies": [
    {"tool_calls": [call("fs.read", path="README.md"), call("agent.spawn", prompt="CHILD list the files")]},
    {"error": "overloaded", "retryable": True},
    {"tool_calls": [call("fs.read", path="notes.txt")]},
    {"text": "parent done"},
]}
CHILD = {"match": "CHILD", "replies": [{"tool_calls": [call("fs.list", path=".")]}, {"text": "child done"}]}


async def record(store, workspace: Path, model: str) -> str:
    executor = Executor(default_registry(), store, workspace=workspace)
    async with RunManager.open(store, executor=executor, llm_backoff_s=0.001) as runs:
        outcome = await runs.run("agent", {"prompt": "Read the workspace."}, model=model)
    assert outcome.status == "completed", outcome.error
    return outcome.run_id


def head_and_count(db: Path) -> tuple[int, int]:
    log = SQLiteLog(db, readonly=True, create=False)
    try:
        return log.head(), log.conn.execute("SELECT count(*) FROM events").fetchone()[0]
    finally:
        log.close()


async def test_replay_has_no_side_effects(store, db_path: Path, tmp_path: Path, workspace: Path) -> None:
    script = tmp_path / "script.json"
    run_id = await record(store, workspace, write_script(script, CHILD, PARENT))
    before = head_and_count(db_path)
    script.unlink()  # the provider cannot be asked again: replay must not need it
    with DatabaseRuns(db_path) as source:
        report = await replay(source, run_id, registry=default_registry())
    assert report.tree_exact, report.first_divergence
    assert [c.status for c in report.children] == ["completed"]
    assert head_and_count(db_path) == before  # nothing appended: no audit, no run events


async def test_until_reconstructs_the_state_at_a_position(store, db_path: Path, tmp_path: Path,
                                                          workspace: Path) -> None:
    run_id = await record(store, workspace, write_script(tmp_path / "s.json", CHILD, PARENT))
    records = await store.read_stream(run_stream(run_id))
    first_turn = next(r for r in records if r.type == "run.llm_turn")
    with DatabaseRuns(db_path) as source:
        report = await replay(source, run_id, until=first_turn.position, registry=default_registry())
    assert report.exact and report.status == "stopped"
    state = report.state
    assert (state.position, state.seq, state.iterations) == (first_turn.position, first_turn.event.seq, 1)
    assert state.tokens == first_turn.event.usage
    assert [m["role"] for m in state.messages] == ["user", "assistant"]
    assert [c["name"] for c in state.messages[1]["tool_calls"]] == ["fs.read", "agent.spawn"]
    assert report.children == []  # the spawn lies after the position: it was not served


async def test_export_import_round_trip_replays_the_same(store, db_path: Path, tmp_path: Path,
                                                         workspace: Path) -> None:
    run_id = await record(store, workspace, write_script(tmp_path / "s.json", CHILD, PARENT))
    log = open_for_reading(db_path)
    out = io.BytesIO()
    try:
        written = export_run(log, run_id, out, children=True)
    finally:
        log.close()
    dump = tmp_path / "run.jsonl"
    dump.write_bytes(out.getvalue())
    from_file = await replay(FileRuns(dump), run_id, registry=default_registry())
    assert from_file.tree_exact and from_file.total_events == written

    copy = SQLiteLog(tmp_path / "copy.db")
    try:
        import_lines(copy, parse_lines(out.getvalue().splitlines()))
    finally:
        copy.close()
    with DatabaseRuns(tmp_path / "copy.db") as source:
        from_copy = await replay(source, run_id, registry=default_registry())
    assert from_copy.tree_exact and from_copy.total_events == from_file.total_events
    original = [(r.stream, r.version, r.type) for r in await store.read_all() if r.stream.startswith("run-")]
    log = open_for_reading(tmp_path / "copy.db")
    try:
        copied = [(r.stream, r.version, r.type) for r in log.read_all()]
    finally:
        log.close()
    assert copied == original


async def test_fork_copies_the_prefix_records_forked_from_and_continues_live(
    store, db_path: Path, tmp_path: Path, workspace: Path,
) -> None:
    model = write_script(tmp_path / "s.json", {"replies": [
        {"tool_calls": [call("fs.read", path="README.md")]},
        {"tool_calls": [call("fs.read", path="notes.txt")]},
        {"text": "original answer"},
    ]})
    run_id = await record(store, workspace, model)
    source = await store.read_stream(run_stream(run_id))
    cut = next(r for r in source if r.type == "run.tool_called")  # after the first tool call
    other = write_script(tmp_path / "other.json", {"replies": [
        {"tool_calls": [call("fs.read", path="README.md")]},
        {"tool_calls": [call("fs.list", path=".")]},
        {"text": "forked answer"},
    ]})
    executor = Executor(default_registry(), store, workspace=workspace)
    async with RunManager.open(store, executor=executor) as runs:
        forked = await fork_run(runs, run_id, cut.position, model=other, overrides={"max_iterations": 5})
    assert forked.outcome.status == "completed" and forked.outcome.result == "forked answer"
    new = await store.read_stream(run_stream(forked.run_id))
    started = new[0].event
    assert isinstance(started, RunStarted)
    assert (started.forked_from.run_id, started.forked_from.position) == (run_id, cut.position)
    assert started.model == other and started.input["max_iterations"] == 5
    prefix = [r for r in source[1:] if r.position <= cut.position]
    assert [(r.type, r.event.seq) for r in new[1 : 1 + len(prefix)]] == [(r.type, r.event.seq) for r in prefix]
    assert new[len(prefix)].event.result == prefix[-1].event.result  # the tool result copied, not re-run
    live = [r.event for r in new[1 + len(prefix):] if r.type == "run.tool_called"]
    assert [e.operation for e in live] == ["fs.list"]
    with DatabaseRuns(db_path) as replayed_source:
        report = await replay(replayed_source, forked.run_id, registry=default_registry())
    assert report.tree_exact, report.first_divergence


async def test_fork_is_refused_when_the_code_no_longer_matches(store, tmp_path: Path, workspace: Path) -> None:
    run_id = await record(store, workspace, write_script(tmp_path / "s.json", {"replies": [
        {"tool_calls": [call("fs.read", path="README.md")]}, {"text": "done"}]}))
    source = await store.read_stream(run_stream(run_id))
    head = await store.head()
    executor = Executor(default_registry(), store, workspace=workspace)
    handlers = changed.registry_with("agent", changed.agent_with_another_prompt)
    async with RunManager.open(store, executor=executor, handlers=handlers) as runs:
        with pytest.raises(ForkRefused, match="no longer matches"):
            await fork_run(runs, run_id, source[-1].position)
    assert await store.head() == head


async def test_fork_refuses_a_cut_through_a_child(store, tmp_path: Path, workspace: Path) -> None:
    run_id = await record(store, workspace, write_script(tmp_path / "s.json", CHILD, PARENT))
    spawned = next(r for r in await store.read_stream(run_stream(run_id)) if r.type == "run.child_spawned")
    executor = Executor(default_registry(), store, workspace=workspace)
    async with RunManager.open(store, executor=executor) as runs:
        with pytest.raises(ForkRefused, match="has not finished by then"):
            await fork_run(runs, run_id, spawned.position)


async def test_a_run_loads_the_same_by_range_scan_and_by_index(
    store, db_path: Path, tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dense runs are read by one scan of their position range, sparse ones through
    the (stream, version) index; both give the stream exactly as the log reads it."""
    import gormes.actors.runs.recorded as replay_log

    run_id = await record(store, workspace, write_script(tmp_path / "s.json", CHILD, PARENT))
    expected = await store.read_stream(run_stream(run_id))
    first, last = expected[0].position, expected[-1].position
    assert last - first + 1 > len(expected)  # audit events lie between the run's own

    loaded = {}
    for dense in (len(expected), 1):  # the range scan, then the index
        monkeypatch.setattr(replay_log, "_DENSE", dense)
        with DatabaseRuns(db_path) as source:
            loaded[dense] = source.load(run_id)
    assert loaded[len(expected)].records == loaded[1].records == tuple(expected)


def test_a_stream_written_out_of_position_order_loads_in_version_order(tmp_path: Path) -> None:
    from gormes.actors.runs.recorded import _sqlite_run_rows

    log = SQLiteLog(tmp_path / "g.db")
    try:
        for version in (2, 1, 3):  # as a foreign writer might have inserted them
            log.conn.execute(
                "INSERT INTO events(stream, version, type, type_version, data, recorded_at) "
                "VALUES ('run-x', ?, 'note.added', 1, '{}', 0)", (version,),
            )
        rows = _sqlite_run_rows(log.conn, "run-x")
    finally:
        log.close()
    assert [(position, version) for position, version, *_ in rows] == [(2, 1), (1, 2), (3, 3)]
