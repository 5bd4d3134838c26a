"""A gateway's oversized input written whole into an approval request.

The caps a gateway has on an operation's input (`job.submit`'s and `run.submit`'s
job data, `job.send`'s and `run.send`'s message: 1 MiB of JSON,
`MAX_UNTRUSTED_DATA_BYTES`) were checked in the handlers, and a handler runs only
once the approval gate lets the call through. With a gate on those operations
(`GORMES_REQUIRE_APPROVAL`), one `job__submit` of 30 MB of data wrote a 31 MB
`approval.requested` before anyone decided, as many times as the gateway's call rate
allowed. The caps are the specs' `check_input` now, which the executor (and a run,
before its own gate) runs right after decoding: such a call is refused and audited,
and nothing else about it is recorded (decision 0088).
"""

from __future__ import annotations

from pathlib import Path

import trio
from mcp_helpers import audit_events, call_refused, gormes_mcp

from gormes.tools.job_trust import MAX_UNTRUSTED_DATA_BYTES

BIG = "y" * (2 * MAX_UNTRUSTED_DATA_BYTES)
HALF = "p" * 600_000  # two of them are over the cap, one is under

GATED = "job.submit,job.send,run.submit,run.send"
# Before the fix each call waited for a decision: the timeout denies it (and keeps the test short).
ENV = {"GORMES_REQUIRE_APPROVAL": GATED, "GORMES_APPROVAL_TIMEOUT": "2", "GORMES_APPROVAL_ON_TIMEOUT": "deny"}


async def _largest_event(store) -> int:
    def largest(conn) -> int:
        return conn.execute("SELECT max(length(data)) FROM events").fetchone()[0] or 0

    return await store.read_sql(largest)


async def test_a_gated_call_over_the_gateways_caps_is_refused_before_its_approval_request(db_path: Path, store):
    calls = [
        ("job__submit", {"name": "echo", "data": BIG}, "job data is"),
        ("job__send", {"id": "no-such-job", "payload": BIG}, "the message is"),
        ("run__send", {"run_id": "no-such-run", "payload": BIG}, "the message is"),
        ("run__submit", {"prompt": HALF, "system": HALF}, "the run's job data is"),
    ]
    async with gormes_mcp(db_path, env=ENV) as client:
        for tool, arguments, what in calls:
            with trio.fail_after(10):
                line = await call_refused(client, tool, **arguments)
            assert line.startswith(f"InvalidOperationInput: {what} "), (tool, line)
            assert f"may send at most {MAX_UNTRUSTED_DATA_BYTES}" in line
    requested = await store.read_all(types=["approval.requested"])
    assert requested == [], [r.event.operation for r in requested]
    # Each refusal is audited, as invalid input, and is all the log holds of it.
    audited = [(e.operation, e.outcome, e.allowed) for e in await audit_events(store)]
    assert audited == [(tool.replace("__", "."), "invalid", False) for tool, _, _ in calls]
    assert await _largest_event(store) < 4096


async def test_a_gated_call_within_the_caps_still_asks_and_records_what_it_asks(db_path: Path, store):
    """The approver sees the input it approves: within the caps, the whole of it."""
    payload = "z" * 500_000
    async with gormes_mcp(db_path, env=ENV) as client:
        with trio.fail_after(20):
            line = await call_refused(client, "job__submit", name="echo", data=payload)
    assert "ApprovalDenied" in line and "timed out" in line, line
    [request] = await store.read_all(types=["approval.requested"])
    assert request.event.operation == "job.submit" and payload in request.event.arguments
