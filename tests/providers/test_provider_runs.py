"""Agent runs on each HTTP provider against its local wire server (which refuses
what the real API refuses): the recording names the neutral operations, replays
exactly, and a run recorded on one provider continues on another by fork."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from anthropic_server import MessagesServer
from anthropic_server import Reply as AnthropicReply
from openai_server import ChatServer, TextReply, ToolCallsReply

from gormes.actors.runs.continuation import fork_run
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.events.jobs import Tokens
from gormes.events.runs import RunLlmTurn, RunToolCalled, run_stream, tokens_of
from gormes.ops.executor import Executor
from gormes.providers import open_provider
from gormes.tools.builtin import default_registry


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "notes").mkdir(parents=True)
    (root / "README.md").write_text("gormes: every step is an event\n")
    (root / "notes" / "a.txt").write_text("alpha\n")
    return root


def opener(**servers):
    """open_provider, pointed at the local server of each scheme given."""
    def open_(spec: str):
        scheme = spec.partition(":")[0]
        if scheme in servers:
            return open_provider(spec, base_url=servers[scheme].base_url, api_key="sk-test", env={})
        return open_provider(spec)
    return open_


def queue_openai(server: ChatServer) -> None:
    server.queue(
        ToolCallsReply([("call_1", "fs__list", '{"path": "notes"}'), ("call_2", "fs__read", '{"path": "README.md"}')]),
        ToolCallsReply([("call_3", "fs__read", '{"path": "notes/a.txt"}')], prompt_tokens=40),
        TextReply("the readme says every step is an event", prompt_tokens=60, cached_tokens=32),
    )


def queue_anthropic(server: MessagesServer) -> None:
    server.queue(
        AnthropicReply("Looking.", tools=[("toolu_1", "fs__list", '{"path": "notes"}'), ("toolu_2", "fs__read", '{"path": "README.md"}')]),
        AnthropicReply(tools=[("toolu_3", "fs__read", '{"path": "notes/a.txt"}')], input_tokens=5, cache_read=35),
        AnthropicReply("the readme says every step is an event", input_tokens=7, cache_creation=20, cache_read=35),
    )


async def record(store, workspace: Path, model: str, providers) -> str:
    executor = Executor(default_registry(), store, workspace=workspace)
    async with RunManager.open(store, executor=executor, providers=providers) as runs:
        outcome = await runs.run("agent", {"prompt": "What does the readme say?", "system": "Be brief."}, model=model)
    assert outcome.status == "completed", outcome.error
    return outcome.run_id


async def assert_replays_exactly(db_path: Path, run_id: str) -> None:
    with DatabaseRuns(db_path) as source:
        report = await replay(source, run_id, registry=default_registry())
    assert report.tree_exact, report.first_divergence


@pytest.mark.parametrize("scheme", ["openai", "anthropic"])
async def test_a_multi_turn_tool_run_records_neutral_names_and_replays(store, db_path, workspace, scheme):
    server_type, queue = (ChatServer, queue_openai) if scheme == "openai" else (MessagesServer, queue_anthropic)
    with server_type() as server:
        queue(server)
        run_id = await record(store, workspace, f"{scheme}:test-model", opener(**{scheme: server}))
    assert server.rejections == [] and len(server.requests) == 3
    events = [r.event for r in await store.read_stream(run_stream(run_id))]
    tools = [e for e in events if isinstance(e, RunToolCalled)]
    assert [(t.operation, t.outcome) for t in tools] == [("fs.list", "ok"), ("fs.read", "ok"), ("fs.read", "ok")]
    turns = [e for e in events if isinstance(e, RunLlmTurn)]
    assert [c.name for c in turns[0].reply.tool_calls] == ["fs.list", "fs.read"]
    wire = json.dumps(server.requests[-1].body)
    assert "fs.read" not in wire and "fs__read" in wire  # the history went out with wire names
    total = sum((tokens_of(e) for e in events), Tokens())
    if scheme == "anthropic":
        # input counts the cached prompt tokens too: 12 + (5 + 35) + (7 + 20 + 35)
        assert (total.input, total.cache_read) == (114, 70)
    else:
        assert (total.input, total.cache_read) == (20 + 40 + 60, 32)
    await assert_replays_exactly(db_path, run_id)


async def test_a_run_recorded_on_openai_continues_on_anthropic_by_fork(store, db_path, workspace):
    with ChatServer() as chat:
        queue_openai(chat)
        run_id = await record(store, workspace, "openai:gpt-test", opener(openai=chat))
    await assert_replays_exactly(db_path, run_id)
    source = await store.read_stream(run_stream(run_id))
    cut = [r for r in source if r.type == "run.tool_called"][1]  # after the first turn's two calls
    with MessagesServer(require_key="sk-test") as messages:
        messages.queue(AnthropicReply(tools=[("toolu_9", "fs__list", '{"path": "."}')]), AnthropicReply("forked answer"))
        executor = Executor(default_registry(), store, workspace=workspace)
        async with RunManager.open(store, executor=executor, providers=opener(anthropic=messages)) as runs:
            forked = await fork_run(runs, run_id, cut.position, model="anthropic:claude-test")
    assert forked.outcome.status == "completed" and forked.outcome.result == "forked answer"
    assert messages.rejections == []
    first = messages.requests[0].body
    # the copied history: OpenAI's calls as tool_use blocks, their results merged in one user turn
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "user"]
    assert [b["name"] for b in first["messages"][1]["content"] if b["type"] == "tool_use"] == ["fs__list", "fs__read"]
    assert [b["tool_use_id"] for b in first["messages"][2]["content"]] == ["call_1", "call_2"]
    assert first["system"] == "Be brief."
    new = [r.event for r in await store.read_stream(run_stream(forked.run_id))]
    live = [e.operation for e in new if isinstance(e, RunToolCalled)]
    assert live == ["fs.list", "fs.read", "fs.list"]
    await assert_replays_exactly(db_path, forked.run_id)
