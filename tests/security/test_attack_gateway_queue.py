"""A gateway's jobs on the operator's own queue (decision 0066).

An operator runs a worker on a queue of its own (`gormes worker --queue critical`)
for its own work. `job.submit` and `run.submit` took any queue from a gateway or a
child agent: a gateway could put `GORMES_GATEWAY_MAX_LIVE_JOBS` (1000) jobs on
`critical`, priority 0, oldest first, and the operator's `critical` jobs waited
behind every one of them: the starvation decision 0060 closed for concurrency keys.
An untrusted caller's queue is now one the operator lists in
`GORMES_GATEWAY_QUEUES` (`default` when unset); any other is refused before
anything is recorded, and the refusal is audited.

And a gateway (or a child agent) reads its concurrency key as it gave it, not
under the prefix decision 0060 stores it with; the operator reads what is stored.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_gormes
from mcp_helpers import CLIENT_NAME, audit_events, call_ok, call_refused, gormes_mcp
from log_reads import log_head, types_after

from gormes.actors.jobs.queue import JobQueue, Submitter
from gormes.actors.runs.manager import RunManager
from gormes.events.runs import RunChildFinished, RunToolCalled, run_stream
from gormes.events.sqlite import SQLiteEventStore
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, OperationDenied
from gormes.tools.builtin import default_registry
from gormes.tools.memory import own_scope

OPERATOR = Submitter(trust="operator", caller="cli")
GATEWAY = Caller(trust="gateway", id="mcp:attacker", scope=own_scope("mcp:attacker"))
GATEWAY_RUN = Caller(trust="gateway", id="run-1", run_id="run-1", scope=own_scope("mcp:attacker"))
CHILD = Caller(trust="child-agent", id="run-2", run_id="run-2", scope=own_scope("mcp:attacker"))
SYSTEM = Caller(trust="system", id="cron:nightly")
FLOOD = 5  # stands for GORMES_GATEWAY_MAX_LIVE_JOBS (1000): each would be ahead of the operator's


@pytest.fixture(autouse=True)
def _no_queue_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts from the default, whatever the developer's shell sets."""
    monkeypatch.delenv("GORMES_GATEWAY_QUEUES", raising=False)


async def _operators_job(db: Path, queue: str) -> Any:
    async with SQLiteEventStore.open(db) as store:
        return await (await JobQueue.open(store)).submit(
            "report", {"who": "operator"}, {"queue": queue}, submitter=OPERATOR)


async def _critical_worker_claims(db: Path) -> list[Any]:
    """What a worker serving only `critical` claims, in order, until nothing is left."""
    async with SQLiteEventStore.open(db) as store:
        queue = await JobQueue.open(store)
        claimed = []
        while (job := await queue.claim({"report", "agent"}, ["critical"], worker_id=f"w{len(claimed)}")) is not None:
            claimed.append(job)
        return claimed




async def _audits(db: Path) -> list[tuple[str, str, str]]:
    async with SQLiteEventStore.open(db) as store:
        return [(a.operation, a.trust, a.outcome) for a in await audit_events(store)]


def _rebuild_check(db: Path) -> None:
    result = run_gormes(db, "projections", "rebuild", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


# -- the attack --------------------------------------------------------------------


async def test_a_gateway_cannot_queue_ahead_of_the_operators_work_on_its_queue(db_path: Path):
    """Through `gormes mcp`: the gateway's flood onto `critical` is refused, so the
    operator's `critical` job that comes after it is the one its worker claims."""
    await _operators_job(db_path, "nightly")  # the database exists (a queue the worker does not serve)
    head = await log_head(db_path)
    async with gormes_mcp(db_path) as client:
        refusals = [await call_refused(client, "job__submit", name="report", data={"who": "gateway"},
                                       options={"queue": "critical"}) for _ in range(FLOOD)]
        refusals.append(await call_refused(client, "run__submit", prompt="p", queue="critical"))
    await _operators_job(db_path, "critical")
    for refusal in refusals:
        assert refusal.startswith("OperationDenied: "), refusal
        assert "'critical'" in refusal and "GORMES_GATEWAY_QUEUES" in refusal and "default" in refusal
        assert "\n" not in refusal
    claimed = await _critical_worker_claims(db_path)
    assert [j.data["who"] for j in claimed] == ["operator"], "the operator's job waits behind the gateway's"
    # nothing but the audits, then the operator's job
    assert await types_after(db_path, head) == ["audit.operation"] * (FLOOD + 1) + ["job.submitted"] + [
        "job.claimed"]
    assert await _audits(db_path) == [("job.submit", "gateway", "denied")] * FLOOD + [
        ("run.submit", "gateway", "denied")]
    _rebuild_check(db_path)


@pytest.mark.parametrize("caller", [GATEWAY, GATEWAY_RUN, CHILD], ids=["gateway", "gateways-run", "child-agent"])
async def test_every_untrusted_route_to_a_queue_is_refused_before_anything_is_recorded(store, caller):
    """Through the executor: job.submit for all three callers (a gateway client, a
    run acting for it, its subagent), run.submit for the classes that may call it."""
    queue = await JobQueue.open(store)
    executor = Executor(default_registry(), store, jobs=queue)
    asks = [("job.submit", {"name": "report", "options": {"queue": "critical"}}),
            ("job.submit", {"name": "report", "options": {"queue": "critical", "priority": 5,
                                                          "idempotency_key": "k", "max_waiting": 10}})]
    if caller.trust == "gateway":  # run.submit is not a child agent's at all
        asks.append(("run.submit", {"prompt": "p", "tools": ["time.now"], "queue": "critical"}))
    head = await store.head()
    for name, value in asks:
        with pytest.raises(OperationDenied, match=r"may not submit to queue 'critical'.*GORMES_GATEWAY_QUEUES"):
            await executor.call(name, value, caller)
    assert await queue.list() == []
    assert [r.type for r in await store.read_all(after_position=head)] == ["audit.operation"] * len(asks)
    assert [(a.operation, a.outcome) for a in await audit_events(store)] == [(n, "denied") for n, _ in asks]


async def test_a_child_agent_in_a_run_may_not_use_the_operators_queue(db_path: Path, tmp_path: Path):
    """A subagent's tool call, as a run makes it (the executor is given a
    child-agent caller there)."""
    script = tmp_path / "child.json"
    script.write_text(json.dumps({"agents": [
        {"match": "CHILD", "replies": [{"tool_calls": [
            {"name": "job.submit", "arguments": {"name": "report", "options": {"queue": "critical"}}},
            {"name": "job.submit", "arguments": {"name": "report"}},
        ]}, {"text": "tried"}]},
        {"replies": [
            {"tool_calls": [{"name": "agent.spawn", "arguments": {"prompt": "CHILD", "tools": ["job.submit"]}}]},
            {"text": "parent done"}]},
    ]}))
    async with SQLiteEventStore.open(db_path) as store:
        queue = await JobQueue.open(store)
        async with RunManager.open(store, executor=Executor(default_registry(), store, jobs=queue)) as runs:
            outcome = await runs.run("agent", {"prompt": "p"}, model=f"scripted:{script}", tools=["job.submit"])
        assert outcome.status == "completed", outcome.error
        parent = [r.event for r in await store.read_stream(run_stream(outcome.run_id))]
        child_id = next(e for e in parent if isinstance(e, RunChildFinished)).child_run_id
        calls = [r.event for r in await store.read_stream(run_stream(child_id)) if isinstance(r.event, RunToolCalled)]
        jobs = await queue.list()
    assert [(c.operation, c.outcome) for c in calls] == [("job.submit", "denied"), ("job.submit", "ok")]
    assert "GORMES_GATEWAY_QUEUES" in calls[0].error
    assert [(j.queue, j.submitter.trust) for j in jobs] == [("default", "child-agent")]


# -- what stays open -----------------------------------------------------------------


async def test_by_default_a_gateway_keeps_the_default_queue(db_path: Path):
    """Unset, the list is `default`: the queue a caller gets when it names none, so a
    gateway that worked before works the same."""
    async with gormes_mcp(db_path) as client:
        unnamed = await call_ok(client, "job__submit", name="report")
        named = await call_ok(client, "job__submit", name="report", options={"queue": "default"})
        run = await call_ok(client, "run__submit", prompt="p")
    assert [unnamed["queue"], named["queue"], run["queue"]] == ["default"] * 3


async def test_the_operator_lists_the_queues_and_the_first_is_the_gateways_default(
        db_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`GORMES_GATEWAY_QUEUES=gateway,batch`: a gateway's job that names no queue (or
    `default`, which is that) goes on `gateway`; it may name `batch`; `default`
    and `critical` are the operator's. The operator is unchanged."""
    monkeypatch.setenv("GORMES_GATEWAY_QUEUES", " gateway , batch,")  # the CLI's too: it is the operator
    async with gormes_mcp(db_path, env={"GORMES_GATEWAY_QUEUES": " gateway , batch,"}) as client:
        unnamed = await call_ok(client, "job__submit", name="report")
        default = await call_ok(client, "job__submit", name="report", options={"queue": "default"})
        batch = await call_ok(client, "job__submit", name="report", options={"queue": "batch"})
        run = await call_ok(client, "run__submit", prompt="p")
        refused = await call_refused(client, "run__submit", prompt="p", queue="critical")
    queues = [unnamed["queue"], default["queue"], batch["queue"], run["queue"]]
    assert queues == ["gateway", "gateway", "batch", "gateway"]
    assert refused.startswith("OperationDenied: ") and "'gateway', 'batch'" in refused
    operators = run_gormes(db_path, "jobs", "submit", "report", "--queue", "critical", "--json")
    assert operators.returncode == 0, operators.stderr
    assert json.loads(operators.stdout)["queue"] == "critical"
    _rebuild_check(db_path)


async def test_the_operator_and_the_system_name_any_queue(store, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GORMES_GATEWAY_QUEUES", "gateway")
    executor = Executor(default_registry(), store, jobs=await JobQueue.open(store))
    for caller in (Caller(trust="operator", id="cli"), SYSTEM):
        for queue in ("critical", "default"):
            job = await executor.call("job.submit", {"name": "report", "options": {"queue": queue}}, caller)
            assert job.queue == queue
        run = await executor.call("run.submit", {"prompt": "p", "tools": ["time.now"]}, caller)
        assert run.queue == "default"


# -- a gateway reads its concurrency key as it gave it --------------------------------


def _prefix(trust: str, scope: str) -> str:
    return f"{trust}:{hashlib.sha256(scope.encode()).hexdigest()[:12]}/"


async def test_a_gateway_reads_its_key_as_it_gave_it_and_the_operator_reads_it_stored(db_path: Path):
    stored = _prefix("gateway", own_scope(f"mcp:{CLIENT_NAME}")) + "prod"
    async with gormes_mcp(db_path) as client:
        submitted = await call_ok(client, "job__submit", name="deploy", options={"concurrency_key": "prod"})
        again = await call_ok(client, "job__submit", name="deploy",  # coalesced: the same job
                              options={"concurrency_key": "prod", "idempotency_key": "once"})
        repeat = await call_ok(client, "job__submit", name="deploy",
                               options={"concurrency_key": "prod", "idempotency_key": "once"})
        got = await call_ok(client, "job__get", id=submitted["id"])
        listed = await call_ok(client, "job__list")
        paused = await call_ok(client, "job__pause", id=submitted["id"])
    assert repeat["id"] == again["id"] and repeat["coalesced"]
    for view in (submitted, again, repeat, got, paused, *listed["jobs"]):
        assert (view["concurrency_key"], view["concurrency_limit"]) == ("prod", 1), view
    shown = json.loads(run_gormes(db_path, "jobs", "get", submitted["id"], "--json").stdout)
    assert shown["concurrency_key"] == shown["options"]["concurrency_key"] == stored
    rows = json.loads(run_gormes(db_path, "jobs", "list", "--json").stdout)
    assert {row["concurrency_key"] for row in rows} == {stored}
    operators = json.loads(run_gormes(db_path, "ops", "call", "job.get", json.dumps({"id": submitted["id"]})).stdout)
    assert operators["concurrency_key"] == stored


async def test_a_child_agent_reads_its_own_key_and_the_operator_the_stored_one(store):
    queue = await JobQueue.open(store)
    executor = Executor(default_registry(), store, jobs=queue)
    mine = await executor.call("job.submit", {"name": "deploy", "options": {"concurrency_key": "prod"}}, CHILD)
    assert mine.concurrency_key == "prod"
    assert (await executor.call("job.get", {"id": mine.id}, CHILD)).concurrency_key == "prod"  # (job.list is not its)
    stored = _prefix("child-agent", CHILD.scope) + "prod"
    assert (await queue.get(mine.id)).concurrency_key == stored
    operator = Caller(trust="operator", id="cli")
    assert (await executor.call("job.get", {"id": mine.id}, operator)).concurrency_key == stored
    assert [j.concurrency_key for j in (await executor.call("job.list", {}, operator)).jobs] == [stored]


async def test_only_the_callers_own_prefix_is_taken_off(store):
    """A job of the gateway's own whose key is not under its prefix (a handler's
    child spawned with a key of the operator's choosing, a Python caller's) reads as
    stored; a key that only looks like another owner's prefix too."""
    queue = await JobQueue.open(store)
    executor = Executor(default_registry(), store, jobs=queue)
    theirs = Submitter(trust="gateway", caller=GATEWAY.id, scope=GATEWAY.scope)
    others = (_prefix("gateway", "chat:mcp-someone-else") + "prod", _prefix("child-agent", GATEWAY.scope) + "x")
    for key in ("plain", *others):
        job = await queue.submit("deploy", None, {"concurrency_key": key}, submitter=theirs)
        assert (await executor.call("job.get", {"id": job.id}, GATEWAY)).concurrency_key == key
