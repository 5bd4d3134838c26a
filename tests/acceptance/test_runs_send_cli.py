"""`gormes runs send`: the operator's message reaches a run running in another
process (here, this test's), audited as run.send; a run that has ended refuses it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio
from cli_helpers import assert_one_line_error, run_gormes

from gormes.actors.runs.context import RunContext, RunHandlerRegistry
from gormes.actors.runs.manager import RunManager


async def test_a_message_sent_from_the_cli_reaches_a_running_run(store, db_path: Path):
    may_read = trio.Event()

    async def read_orders(ctx: RunContext, input: Any) -> Any:
        await may_read.wait()  # reads once the message is sent
        return [item.payload for item in await ctx.inbox()]

    async def cli(*args: str) -> Any:
        return await trio.to_thread.run_sync(lambda: run_gormes(db_path, *args))

    async with RunManager.open(store, handlers=RunHandlerRegistry({"read_orders": read_orders})) as runs:
        handle = await runs.start("read_orders", {"why": "test"})
        sent = await cli("runs", "send", handle.run_id, "--payload", '{"order": "be brief"}', "--json")
        may_read.set()
        outcome = await handle.outcome()
        too_late = await cli("runs", "send", handle.run_id, "--payload", '"again"')
        unknown = await cli("runs", "send", "no-such-run", "--payload", "1")

    assert sent.returncode == 0, sent.stderr
    message = json.loads(sent.stdout)
    assert (message["run_id"], message["sender"]) == (handle.run_id, "operator")
    assert outcome.result == [{"order": "be brief"}]
    assert "has ended" in assert_one_line_error(too_late)
    assert "no-such-run" in assert_one_line_error(unknown)
    audits = [r.event for r in await store.read_all() if r.type == "audit.operation"]
    assert [(a.operation, a.trust, a.caller, a.outcome) for a in audits] == [
        ("run.send", "operator", "cli", "ok"), ("run.send", "operator", "cli", "invalid"),
        ("run.send", "operator", "cli", "invalid")]


def test_a_payload_that_is_not_json_is_one_line_and_opens_nothing(tmp_path: Path):
    db = tmp_path / "g.db"
    line = assert_one_line_error(run_gormes(db, "runs", "send", "r-1", "--payload", "{oops"))
    assert "--payload is not JSON" in line
    assert not db.exists()
