"""job.submit and run.submit record their caller as the job's Submitter, and the
rules of gormes/tools/job_trust.py, through the real executor and queue."""

from __future__ import annotations

import pytest

from gormes.actors.jobs.queue import JobQueue, Submitter
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, OperationDenied

OPERATOR = Caller(trust="operator", id="cli")
CRON = Caller(trust="system", id="cron:tick", scope="project:team")
GATEWAY = Caller(trust="gateway", id="mcp:alice")
GATEWAY_RUN = Caller(trust="gateway", id="run-1", run_id="1", scope="chat:mcp-alice")
CHILD = Caller(trust="child-agent", id="run-2", run_id="2", scope="chat:mcp-alice")


@pytest.fixture
async def queue(store) -> JobQueue:
    return await JobQueue.open(store)


@pytest.fixture
def executor(store, queue) -> Executor:
    return Executor(default_registry(), store, jobs=queue)


@pytest.mark.parametrize(("caller", "scope"), [
    (OPERATOR, None), (CRON, "project:team"), (GATEWAY, "chat:mcp-alice"),
    (GATEWAY_RUN, "chat:mcp-alice"), (CHILD, "chat:mcp-alice"),
])
async def test_the_caller_is_recorded_as_the_submitter(executor, queue, caller, scope):
    job = await executor.call("job.submit", {"name": "echo"}, caller)
    expected = Submitter(trust=caller.trust, caller=caller.id, scope=scope)
    assert job.submitter == expected and (await queue.get(job.id)).submitter == expected


async def test_run_submit_records_its_caller_too(executor, queue):
    job = await executor.call("run.submit", {"prompt": "p", "tools": ["time.now"]}, GATEWAY)
    assert job.submitter == Submitter(trust="gateway", caller="mcp:alice", scope="chat:mcp-alice")


async def test_only_the_owner_or_an_operator_attaches_a_child(executor, queue):
    theirs = await executor.call("job.submit", {"name": "parent"}, GATEWAY)
    # A child agent (even in the same scope) and another gateway client are strangers.
    for stranger in (CHILD, Caller(trust="gateway", id="mcp:bob")):
        with pytest.raises(OperationDenied, match=f"attach a child to job {theirs.id}"):
            await executor.call("job.submit", {"name": "c", "options": {"parent_id": theirs.id}}, stranger)
    assert (await queue.get(theirs.id)).live_children == 0
    # The client itself, a run acting for it (its trust class and scope) and cron may.
    for owner in (GATEWAY, GATEWAY_RUN, CRON):
        child = await executor.call("job.submit", {"name": "c", "options": {"parent_id": theirs.id}}, owner)
        assert child.parent_id == theirs.id
    assert (await queue.get(theirs.id)).live_children == 3


async def test_a_gateway_reads_only_its_own_jobs(executor, queue):
    mine = await executor.call("job.submit", {"name": "mine"}, GATEWAY)
    run_made = await executor.call("job.submit", {"name": "by-my-run"}, GATEWAY_RUN)
    theirs = await executor.call("job.submit", {"name": "theirs", "data": {"secret": 1}}, OPERATOR)
    bob = Caller(trust="gateway", id="mcp:bob")
    for tool in ("job.get", "job.inbox"):
        with pytest.raises(OperationDenied, match="another caller's"):
            await executor.call(tool, {"id": theirs.id}, GATEWAY)
        with pytest.raises(OperationDenied):
            await executor.call(tool, {"id": mine.id}, bob)
    assert (await executor.call("job.get", {"id": mine.id}, GATEWAY)).name == "mine"
    listed = await executor.call("job.list", {}, GATEWAY)
    assert sorted(j.id for j in listed.jobs) == sorted([mine.id, run_made.id])
    assert (await executor.call("job.list", {}, bob)).jobs == []
    assert len((await executor.call("job.list", {}, OPERATOR)).jobs) == 3


async def test_a_job_with_no_submitter_is_only_the_operators_to_steer(executor, queue):
    old = await queue.submit("echo", None)  # recorded before submitters, or from Python
    with pytest.raises(OperationDenied):
        await executor.call("job.pause", {"id": old.id}, GATEWAY)
    assert (await executor.call("job.pause", {"id": old.id}, OPERATOR)).status == "paused"


async def test_the_operators_allowlist_lets_a_gateway_choose_a_model(executor, monkeypatch):
    with pytest.raises(OperationDenied, match="GORMES_GATEWAY_MODELS"):
        await executor.call("run.submit", {"prompt": "p", "model": "openai:gpt-4o-mini"}, GATEWAY)
    monkeypatch.setenv("GORMES_GATEWAY_MODELS", " openai:gpt-4o-mini ,scripted:demo.json")
    job = await executor.call("run.submit", {"prompt": "p", "model": "openai:gpt-4o-mini"}, GATEWAY)
    assert job.data["model"] == "openai:gpt-4o-mini"
    with pytest.raises(OperationDenied):
        await executor.call("run.submit", {"prompt": "p", "model": "openai:gpt-4o"}, GATEWAY)
    operator = await executor.call("run.submit", {"prompt": "p", "model": "openai:gpt-4o"}, OPERATOR)
    assert operator.data["model"] == "openai:gpt-4o"


async def test_a_bad_live_job_cap_refuses_rather_than_lifting_it(executor, monkeypatch):
    from gormes.errors import UserError

    monkeypatch.setenv("GORMES_GATEWAY_MAX_LIVE_JOBS", "lots")
    with pytest.raises(UserError, match="GORMES_GATEWAY_MAX_LIVE_JOBS"):
        await executor.call("job.submit", {"name": "echo"}, GATEWAY)
    monkeypatch.setenv("GORMES_GATEWAY_MAX_LIVE_JOBS", "0")
    with pytest.raises(OperationDenied, match="at most 0"):
        await executor.call("job.submit", {"name": "echo"}, GATEWAY)
    assert (await executor.call("job.submit", {"name": "echo"}, OPERATOR)).name == "echo"


async def test_child_agents_share_their_class_cap_whatever_run_or_scope_they_act_for(executor, monkeypatch):
    """The cap is the class's (an MCP client names itself, and so a run's caller id
    and scope follow a name someone chose): child agents of other runs and scopes
    count together, apart from the gateways'."""
    monkeypatch.setenv("GORMES_GATEWAY_MAX_LIVE_JOBS", "2")
    other_child = Caller(trust="child-agent", id="run-9", run_id="9", scope="project:other")
    await executor.call("job.submit", {"name": "echo"}, CHILD)
    await executor.call("job.submit", {"name": "echo"}, other_child)
    for child in (CHILD, other_child):  # (run.submit is not theirs at all)
        with pytest.raises(OperationDenied, match="'child-agent' callers may hold at most 2 unfinished jobs"):
            await executor.call("job.submit", {"name": "echo"}, child)
    assert (await executor.call("job.submit", {"name": "echo"}, GATEWAY)).name == "echo"  # another class


@pytest.mark.parametrize("caller", [GATEWAY_RUN, CHILD])
async def test_a_runs_tool_call_gets_a_concurrency_key_of_its_own(executor, queue, caller):
    """What a gateway's run or its subagent submits from a tool call (the caller the
    executor is given there) holds a key of its own owner, never the operator's
    `prod` (decision 0060)."""
    operator = await executor.call("job.submit", {"name": "echo", "options": {"concurrency_key": "prod"}}, OPERATOR)
    theirs = await executor.call("job.submit", {"name": "echo", "options": {"concurrency_key": "prod"}}, caller)
    assert (await queue.get(operator.id)).options.concurrency_key == "prod"
    key = (await queue.get(theirs.id)).options.concurrency_key
    assert key.startswith(f"{caller.trust}:") and key.endswith("/prod")
    claimed = [await queue.claim({"echo"}, worker_id="w1"), await queue.claim({"echo"}, worker_id="w2")]
    assert {job.id for job in claimed if job is not None} == {operator.id, theirs.id}


async def test_the_queue_list_is_read_as_the_operator_wrote_it(executor, monkeypatch):
    """Names stripped, compared as written, repeats dropped; blank is `default`; a
    name no queue may have is the operator's mistake, said in one line."""
    from gormes.errors import UserError

    for blank in ("", " , ,"):
        monkeypatch.setenv("GORMES_GATEWAY_QUEUES", blank)
        assert (await executor.call("job.submit", {"name": "echo"}, GATEWAY)).queue == "default"
    monkeypatch.setenv("GORMES_GATEWAY_QUEUES", "bulk, bulk ,Chat")
    assert (await executor.call("job.submit", {"name": "echo"}, CHILD)).queue == "bulk"
    assert (await executor.call("job.submit", {"name": "echo", "options": {"queue": "Chat"}}, GATEWAY)).queue == "Chat"
    for other in ("chat", " bulk", "critical"):
        with pytest.raises(OperationDenied, match=r"use only 'bulk', 'Chat' \(GORMES_GATEWAY_QUEUES\)"):
            await executor.call("job.submit", {"name": "echo", "options": {"queue": other}}, GATEWAY)
    monkeypatch.setenv("GORMES_GATEWAY_QUEUES", "ok," + "q" * 201)
    with pytest.raises(UserError, match="GORMES_GATEWAY_QUEUES names a queue of 201 characters"):
        await executor.call("job.submit", {"name": "echo"}, GATEWAY)
    assert (await executor.call("job.submit", {"name": "echo", "options": {"queue": "x"}}, OPERATOR)).queue == "x"
