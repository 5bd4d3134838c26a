"""A fork that replaces a tool result continues on a real HTTP provider's wire (the
local OpenAI server): the model is sent the replacement, not what was recorded, and
the fork replays exactly (decision 0034)."""

from __future__ import annotations

import json
from pathlib import Path

from openai_server import ChatServer, TextReply, ToolCallsReply
from test_provider_runs import assert_replays_exactly, opener, record

from gormes.actors.runs.continuation import fork_run
from gormes.actors.runs.fork_replace import tool_result_replacement
from gormes.actors.runs.manager import RunManager
from gormes.events.runs import RunToolCalled, run_stream
from gormes.ops.executor import Executor
from gormes.tools.builtin import default_registry


async def test_the_model_is_sent_the_replaced_tool_result(store, db_path: Path, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("gormes: every step is an event\n")
    with ChatServer() as chat:
        chat.queue(ToolCallsReply([("call_1", "fs__read", '{"path": "README.md"}')]),
                   TextReply("the readme says every step is an event"))
        run_id = await record(store, workspace, "openai:gpt-test", opener(openai=chat))
    read = next(r for r in await store.read_stream(run_stream(run_id)) if r.type == "run.tool_called")
    with ChatServer() as chat:
        chat.queue(ToolCallsReply([("call_2", "fs__list", '{"path": "."}')]), TextReply("the readme is gone"))
        executor = Executor(default_registry(), store, workspace=workspace)
        async with RunManager.open(store, executor=executor, providers=opener(openai=chat)) as runs:
            forked = await fork_run(runs, run_id, read.position,
                                    replace=tool_result_replacement('{"error": "README.md was deleted"}'))
    assert chat.rejections == []
    assert (forked.outcome.status, forked.outcome.result) == ("completed", "the readme is gone")
    sent = chat.requests[0].body["messages"]
    tool_messages = [m for m in sent if m["role"] == "tool"]
    assert [json.loads(m["content"]) for m in tool_messages] == [{"error": "README.md was deleted"}]
    assert "every step is an event" not in json.dumps(sent)  # the recorded result never went out
    calls = [e for e in (r.event for r in await store.read_stream(run_stream(forked.run_id)))
             if isinstance(e, RunToolCalled)]
    assert [(e.operation, e.outcome) for e in calls] == [("fs.read", "ok"), ("fs.list", "ok")]
    assert len(chat.requests) == 2  # the prefix's model turn was copied, not asked again
    await assert_replays_exactly(db_path, forked.run_id)
