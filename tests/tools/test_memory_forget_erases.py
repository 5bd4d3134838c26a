"""memory forget erases (issue 18, decision 0026): a fact remembered by a run is
gone from `events`, every projection, the FTS index and `export` afterwards; the
run that recorded it says its replay stops at the redacted observation; the
other runs still replay exactly. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pg_helpers import backend, store_on_both_backends, url_for_schema  # noqa: F401 (fixtures)

from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns, RedactedRecording
from gormes.actors.runs.replay import replay
from gormes.events.base import Recorded
from gormes.events.jsonl import STORED_JSON, to_line
from gormes.events.memory import fact_id
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller
from gormes.projections.registry import all_projections
from gormes.projections.runner import ProjectionRunner
from gormes.tools.builtin import default_registry

SECRET = "Ada keeps the spare key under the blue flowerpot"
OPERATOR = Caller(trust="operator", id="cli")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "README.md").write_text("gormes: every step is an event\n")
    return root


def database_of(store: Any) -> Any:
    return url_for_schema(store.schema) if store.dialect == "postgres" else store.path


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def script(tmp_path: Path, name: str, *replies: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"model": "scripted", "agents": [{"replies": list(replies)}]}))
    return f"scripted:{path}"


async def record(store: Any, executor: Executor, model: str, prompt: str) -> str:
    async with RunManager.open(store, executor=executor, llm_backoff_s=0.001) as runs:
        outcome = await runs.run("agent", {"prompt": prompt}, model=model)
    assert outcome.status == "completed", outcome.error
    return outcome.run_id


async def catch_up_all(store: Any) -> None:
    for projection in all_projections():
        if projection.name != "ledger":  # inline: always current
            await ProjectionRunner(store, projection).catch_up(upto=await store.head())


async def all_text(store: Any) -> str:
    """Every table of the database as text: the log, every projection, the FTS index."""
    def dump(conn: Any) -> str:
        if store.dialect == "postgres":
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()").fetchall()]
        else:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()]
        return "\n".join(repr(conn.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)
    return await store.read_sql(dump)


async def export_text(store: Any) -> bytes:
    return b"".join(await store.read_with(
        lambda log: [to_line(r) for r in STORED_JSON.decode_rows(log.select_rows(), Recorded)]))


async def test_a_forgotten_fact_leaves_the_log_projections_fts_and_export(
    store: Any, tmp_path: Path, workspace: Path
) -> None:
    executor = Executor(default_registry(), store, workspace=workspace)
    remembering = await record(store, executor, script(
        tmp_path, "remember",
        {"tool_calls": [call("memory.remember", fact=SECRET)]},
        {"text": f"noted: {SECRET}"},
    ), "Remember what the notes say.")
    told = await record(store, executor, script(
        tmp_path, "told", {"text": "I will not write that down"},
    ), f"Please remember: {SECRET}")
    other = await record(store, executor, script(
        tmp_path, "other", {"tool_calls": [call("fs.read", path="README.md")]}, {"text": "read it"},
    ), "Read the readme.")
    await catch_up_all(store)
    assert SECRET in await all_text(store)  # the test can see it before
    recalled = await executor.call("memory.recall", {"query": "spare key flowerpot"}, OPERATOR)
    assert recalled.hits

    forgotten = await executor.call(
        "memory.forget", {"id": fact_id("project:default", SECRET), "reason": "asked to"}, OPERATOR)
    r = forgotten.redaction
    assert r.redacted >= 3  # the memory event, the run's tool call, its model turn(s)...
    assert any(s.startswith("run-") for s in r.streams) and any(s.startswith("memory-") for s in r.streams)
    assert "memory" in r.projections

    await catch_up_all(store)  # whatever is not folded yet folds without it
    text = await all_text(store)
    for piece in (SECRET, "blue flowerpot", json.dumps(SECRET)[1:-1]):
        assert piece not in text
    assert b"flowerpot" not in await export_text(store)
    recalled = await executor.call("memory.recall", {"query": "spare key flowerpot"}, OPERATOR)
    assert not recalled.hits

    source = DatabaseRuns(database_of(store))
    try:
        kept = await replay(source, other, registry=default_registry())
        gone = await replay(source, remembering, registry=default_registry())
        with pytest.raises(RedactedRecording, match="cannot be replayed: run.started event .* was redacted"):
            await replay(source, told, registry=default_registry())
    finally:
        source.close()
    assert kept.tree_exact and kept.status == "completed"
    assert gone.status == "redacted" and not gone.tree_exact and gone.divergence is None
    assert re.match(r"observation at seq \d+ \(position \d+\) was redacted on ", gone.notes[0])
    assert "was redacted on" in gone.notes[0] and "cannot replay exactly past it" in gone.notes[0]
    assert "by operator:cli (asked to)" in gone.notes[0]
