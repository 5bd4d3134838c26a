"""Approval gates in a run outside a job (decision 0033): the run records the
request and waits in its process; approved, the call runs; denied or timed out,
it is a denied tool call (or, under `fail`, the run fails); replay serves the
recorded decision and never asks again; only an operator outside any run decides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from run_helpers import run_events, wait_until

from gormes.actors.runs.approval_book import ApprovalNotPending, UnknownApproval, read_approvals
from gormes.actors.runs.approvals import ApprovalPolicy, InvalidApprovalPolicy
from gormes.actors.runs.manager import RunManager
from gormes.actors.runs.recorded import DatabaseRuns
from gormes.actors.runs.replay import replay
from gormes.events.approvals import RunApprovalDecided, RunApprovalRequested
from gormes.events.runs import RunToolCalled
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, OperationDenied
from gormes.tools.builtin import default_registry

OPERATOR = Caller(trust="operator", id="cli")


def call(name: str, **arguments: Any) -> dict:
    return {"name": name, "arguments": arguments}


def _model(script) -> str:
    return script({"replies": [{"tool_calls": [call("fs.read", path="README.md")]}, {"text": "done"}]})


async def _pending(store) -> list[Any]:
    return [a for a in (await read_approvals(store)).values() if a.pending]


async def _decide_when_asked(store, operation: str, reason: str = "looked at it") -> str:
    await wait_until(lambda: _has_pending(store))
    [approval] = await _pending(store)
    await Executor(default_registry(), store).call(
        operation, {"id": approval.request.approval_id, "reason": reason}, OPERATOR)
    return approval.request.approval_id


async def _has_pending(store) -> bool:
    return bool(await _pending(store))


async def _replays_exactly(db_path: Path, run_id: str) -> None:
    with DatabaseRuns(db_path) as source:
        report = await replay(source, run_id, registry=default_registry())
    assert report.first_divergence is None, report.first_divergence
    assert report.tree_exact


async def _run(store, executor, model: str, policy: ApprovalPolicy, decide: str | None) -> Any:
    async with RunManager.open(store, executor=executor, approvals=policy) as runs:
        async with trio.open_nursery() as nursery:
            if decide is not None:
                nursery.start_soon(_decide_when_asked, store, decide)
            outcome = await runs.run("agent", {"prompt": "read it"}, model=model, tools=["fs.read"])
    return outcome


async def test_an_approved_call_runs_and_the_run_replays_exactly(store, db_path, executor, script) -> None:
    outcome = await _run(store, executor, _model(script), ApprovalPolicy(require=("fs.*",)), "approval.approve")
    assert outcome.status == "completed", outcome.error
    events = await run_events(store, outcome.run_id)
    [asked] = [e for e in events if isinstance(e, RunApprovalRequested)]
    [decided] = [e for e in events if isinstance(e, RunApprovalDecided)]
    [tool] = [e for e in events if isinstance(e, RunToolCalled)]
    assert asked.seq + 1 == decided.seq and decided.seq + 1 == tool.seq
    assert asked.operation == "fs.read" and "deployment rule 'fs.*'" in asked.why
    assert (decided.decision, decided.by, decided.reason) == ("approved", "operator:cli", "looked at it")
    assert tool.outcome == "ok" and "every step is an event" in tool.result["content"]
    approval = (await read_approvals(store))[asked.approval_id]
    assert approval.status == "approved" and approval.request.run_id == outcome.run_id
    audits = [r.event for r in await store.read_all(types=["audit.operation"])]
    assert [(a.operation, a.outcome) for a in audits if a.operation.startswith("approval.")] == [
        ("approval.request", "ok"), ("approval.approve", "ok")]
    await _replays_exactly(db_path, outcome.run_id)


async def test_a_denied_call_is_a_denied_tool_error_and_replays_exactly(store, db_path, executor, script) -> None:
    outcome = await _run(store, executor, _model(script), ApprovalPolicy(require=("fs.read",)), "approval.deny")
    assert outcome.status == "completed", outcome.error  # the model was told, and answered
    events = await run_events(store, outcome.run_id)
    [decided] = [e for e in events if isinstance(e, RunApprovalDecided)]
    [tool] = [e for e in events if isinstance(e, RunToolCalled)]
    assert decided.decision == "denied"
    assert (tool.outcome, tool.error_type) == ("denied", "ApprovalDenied")
    assert tool.error == f"approval {decided.approval_id} denied by operator:cli: looked at it"
    await _replays_exactly(db_path, outcome.run_id)


async def test_a_timeout_denies_the_call(store, db_path, executor, script) -> None:
    policy = ApprovalPolicy(require=("fs.read",), timeout_s=0.2, on_timeout="deny")
    outcome = await _run(store, executor, _model(script), policy, None)
    assert outcome.status == "completed", outcome.error
    events = await run_events(store, outcome.run_id)
    [decided] = [e for e in events if isinstance(e, RunApprovalDecided)]
    [tool] = [e for e in events if isinstance(e, RunToolCalled)]
    assert (decided.decision, decided.by, decided.on_timeout) == ("timed_out", "system:approval-timeout", "deny")
    assert tool.outcome == "denied" and "timed out" in tool.error
    audits = [r.event for r in await store.read_all(types=["audit.operation"])]
    assert [(a.operation, a.trust) for a in audits if a.operation == "approval.expire"] == [("approval.expire", "system")]
    await _replays_exactly(db_path, outcome.run_id)


async def test_a_timeout_under_fail_fails_the_run(store, db_path, executor, script) -> None:
    policy = ApprovalPolicy(require=("fs.read",), timeout_s=0.2, on_timeout="fail")
    outcome = await _run(store, executor, _model(script), policy, None)
    assert outcome.status == "failed"
    assert "timed out with no decision: the run fails" in outcome.error
    assert not [e for e in await run_events(store, outcome.run_id) if isinstance(e, RunToolCalled)]
    await _replays_exactly(db_path, outcome.run_id)


async def test_a_spec_that_requires_approval_is_gated_with_no_deployment_rule(store, executor, script) -> None:
    import msgspec

    from gormes.ops.registry import Registry
    from gormes.ops.spec import OperationSpec

    class In(msgspec.Struct):
        amount: int

    class Out(msgspec.Struct):
        sent: bool

    async def send(ctx: Any, value: In) -> Out:
        return Out(sent=True)

    spec = OperationSpec(name="payments.send", description="Send money.", input_type=In, output_type=Out,
                         handler=send, trust=frozenset({"operator", "child-agent"}), audit_kind="payments.write",
                         prompt_visible=True, requires_approval=True)
    registry = Registry([*default_registry().list(), spec])
    model = script({"replies": [{"tool_calls": [call("payments.send", amount=5)]}, {"text": "paid"}]})
    async with RunManager.open(store, executor=Executor(registry, store), approvals=ApprovalPolicy()) as runs:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_decide_when_asked, store, "approval.approve")
            outcome = await runs.run("agent", {"prompt": "pay"}, model=model, tools=["payments.send"])
    assert outcome.status == "completed", outcome.error
    events = await run_events(store, outcome.run_id)
    [asked] = [e for e in events if isinstance(e, RunApprovalRequested)]
    assert asked.why == "payments.send requires approval (its operation spec)"
    assert [e.result for e in events if isinstance(e, RunToolCalled)] == [{"sent": True}]


async def test_no_rule_no_gate(store, executor, script) -> None:
    async with RunManager.open(store, executor=executor, approvals=ApprovalPolicy()) as runs:
        outcome = await runs.run("agent", {"prompt": "read"}, model=_model(script), tools=["fs.read"])
    assert outcome.status == "completed"
    assert not [e for e in await run_events(store, outcome.run_id) if isinstance(e, RunApprovalRequested)]
    assert await read_approvals(store) == {}


async def test_only_an_operator_outside_a_run_decides_and_a_decision_stands_once(store, executor, script) -> None:
    policy = ApprovalPolicy(require=("fs.read",))
    decider = Executor(default_registry(), store)
    async with RunManager.open(store, executor=executor, approvals=policy) as runs:
        handle = await runs.start("agent", {"prompt": "read"}, model=_model(script), tools=["fs.read"])
        await wait_until(lambda: _has_pending(store))
        [approval] = await _pending(store)
        approval_id = approval.request.approval_id
        ask = {"id": approval_id, "reason": "mine"}
        for caller in (Caller(trust="child-agent", id="run-x", run_id="x"), Caller(trust="gateway", id="mcp:x"),
                       Caller(trust="system", id="cron"),
                       Caller(trust="operator", id=f"run-{handle.run_id}", run_id=handle.run_id)):
            with pytest.raises(OperationDenied):
                await decider.call("approval.approve", ask, caller)
        assert (await read_approvals(store))[approval_id].pending
        with pytest.raises(UnknownApproval):
            await decider.call("approval.deny", {"id": "NOPE", "reason": "x"}, OPERATOR)
        await decider.call("approval.deny", ask, OPERATOR)
        with pytest.raises(ApprovalNotPending):
            await decider.call("approval.approve", ask, OPERATOR)
        outcome = await handle.outcome()
    assert outcome.status == "completed"
    assert (await read_approvals(store))[approval_id].status == "denied"
    audits = [r.event for r in await store.read_all(types=["audit.operation"])]
    refused = [(a.trust, a.outcome) for a in audits if a.operation == "approval.approve"]
    assert refused == [("child-agent", "denied"), ("gateway", "denied"), ("system", "denied"),
                       ("operator", "denied"), ("operator", "invalid")]


def test_the_policy_from_the_environment() -> None:
    policy = ApprovalPolicy.from_env({"GORMES_REQUIRE_APPROVAL": "shell.run, knowledge.write payments.*",
                                      "GORMES_APPROVAL_TIMEOUT": "60", "GORMES_APPROVAL_ON_TIMEOUT": "fail"})
    assert policy == ApprovalPolicy(require=("shell.run", "knowledge.write", "payments.*"), timeout_s=60.0,
                                    on_timeout="fail")
    assert ApprovalPolicy.from_env({"GORMES_APPROVAL_TIMEOUT": "none"}).timeout_s is None
    for bad in ({"GORMES_APPROVAL_TIMEOUT": "soon"}, {"GORMES_APPROVAL_TIMEOUT": "-1"},
                {"GORMES_APPROVAL_ON_TIMEOUT": "shrug"}):
        with pytest.raises(InvalidApprovalPolicy):
            ApprovalPolicy.from_env(bad)


async def _fork_at_a_used_approval(store, executor, script) -> str:
    """A run whose call was approved, then a fork at its request; the fork's own
    request is denied. The fork's run id."""
    from gormes.actors.runs.continuation import fork_run

    policy = ApprovalPolicy(require=("fs.*",))
    source = await _run(store, executor, _model(script), policy, "approval.approve")
    assert source.status == "completed", source.error
    [asked] = [r for r in await store.read_stream(f"run-{source.run_id}")
               if isinstance(r.event, RunApprovalRequested)]
    first = (await read_approvals(store))[asked.event.approval_id]
    assert first.used_by == source.run_id
    async with RunManager.open(store, executor=executor, approvals=policy) as runs:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_decide_when_asked, store, "approval.deny", "not twice")
            forked = await fork_run(runs, source.run_id, at=asked.position)
    assert forked.outcome.status == "completed", forked.outcome.error
    events = await run_events(store, forked.run_id)
    requests = [e for e in events if isinstance(e, RunApprovalRequested)]
    assert [r.approval_id for r in requests][0] == asked.event.approval_id  # the copied prefix
    [again] = requests[1:]
    [decided] = [e for e in events if isinstance(e, RunApprovalDecided)]
    [tool] = [e for e in events if isinstance(e, RunToolCalled)]
    assert decided.approval_id == again.approval_id and decided.decision == "denied"
    assert tool.outcome == "denied"  # the fork's call did not run on the source's approval
    approvals = await read_approvals(store)
    assert f"asked again: approval {asked.event.approval_id} served run {source.run_id}" in approvals[
        again.approval_id].request.why
    assert approvals[again.approval_id].used_by == forked.run_id
    return forked.run_id


async def test_a_fork_at_a_used_approval_asks_again_and_replays_exactly(store, db_path, executor, script) -> None:
    """An attacker's finding: a fork whose prefix ended on an approval's request took
    the source run's decision, already used, and ran the approved call a second
    time with nobody asked. A decision serves one run's call, once (`approval.used`)."""
    forked = await _fork_at_a_used_approval(store, executor, script)
    await _replays_exactly(db_path, forked)


async def test_on_postgresql_a_fork_at_a_used_approval_asks_again(tmp_path, workspace, script) -> None:
    from pg_helpers import backend_store

    async with backend_store("postgres", tmp_path / "unused.db") as store:
        await _fork_at_a_used_approval(store, Executor(default_registry(), store, workspace=workspace), script)


async def test_a_decision_recorded_before_claims_existed_is_not_used_again(
    store, executor, script, monkeypatch,
) -> None:
    """A database written before `approval.used`: the source run recorded its
    decision but made no claim. A fork at the request still asks again."""
    from gormes.actors.runs import approvals as gate
    from gormes.actors.runs.continuation import fork_run

    policy = ApprovalPolicy(require=("fs.*",))
    with monkeypatch.context() as older:  # the older gormes: the decision recorded, nothing claimed
        older.setattr(gate, "claim_in", lambda tx, now, approval_id, run_id: True)
        source = await _run(store, executor, _model(script), policy, "approval.approve")
    [asked] = [r for r in await store.read_stream(f"run-{source.run_id}")
               if isinstance(r.event, RunApprovalRequested)]
    assert (await read_approvals(store))[asked.event.approval_id].used_by is None
    async with RunManager.open(store, executor=executor, approvals=policy) as runs:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_decide_when_asked, store, "approval.deny", "not twice")
            forked = await fork_run(runs, source.run_id, at=asked.position)
    events = await run_events(store, forked.run_id)
    [tool] = [e for e in events if isinstance(e, RunToolCalled)]
    assert tool.outcome == "denied"
    assert len([e for e in events if isinstance(e, RunApprovalRequested)]) == 2


async def test_a_gated_call_over_its_classs_caps_is_refused_before_the_run_asks(store, db_path, executor, script) -> None:
    """A gateway's run whose model submits job data over its class's cap under a gate:
    the refusal is its tool call's record, and no request holds the data (decision
    0088); before, the run recorded a 2 MiB `approval.requested` and waited."""
    big = "y" * (2 * 1024 * 1024)
    model = script({"replies": [{"tool_calls": [{"name": "job.submit", "arguments": {"name": "echo", "data": big}}]}, {"text": "done"}]})
    policy = ApprovalPolicy(require=("job.submit",), timeout_s=0.5, on_timeout="deny")
    async with RunManager.open(store, executor=executor, approvals=policy) as runs:
        outcome = await runs.run("agent", {"prompt": "submit it"}, model=model, tools=["job.submit"],
                                 trust="gateway")
    assert outcome.status == "completed", outcome.error
    events = await run_events(store, outcome.run_id)
    assert not [e for e in events if isinstance(e, (RunApprovalRequested, RunApprovalDecided))]
    assert await store.read_all(types=["approval.requested"]) == []
    [tool] = [e for e in events if isinstance(e, RunToolCalled)]
    assert (tool.outcome, tool.error_type) == ("error", "InvalidOperationInput")
    assert tool.error.startswith("job data is 2097154 bytes of JSON; a 'gateway' caller may send at most")
    audits = [r.event for r in await store.read_all(types=["audit.operation"])]
    assert [(a.operation, a.outcome, a.allowed) for a in audits if a.operation == "job.submit"] == [
        ("job.submit", "invalid", False)]
    await _replays_exactly(db_path, outcome.run_id)
