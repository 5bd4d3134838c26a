"""Attacks on the job queue's doors: `job.submit`, `run.submit` and the steering
operations, as a gateway (`gormes mcp` through the real mcp SDK client) and as a
child agent (a run on a scripted model whose script asks for the tool call).

- One route into a run: `job.submit` of an `agent` job is refused to gateways and
  child agents ("use run.submit"), and `run.submit` lets them pick no model outside
  the operator's allowlist (`GORMES_GATEWAY_MODELS`), refused before anything
  reads a path (the refusal is the same whether the path exists or not).
- Only a job's owner (its recorded submitter) or an operator/system caller may
  attach children to it, or pause, resume or cancel it.
- Job options out of range are invalid input, not an OverflowError.
- Idempotency keys are the submitter's own; a gateway may not jump the queue
  (negative priority) or send huge job data; an exponential backoff never
  overflows the ledger.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import assert_one_line_error, run_gormes
from mcp_helpers import CLIENT_NAME, audit_events, call_ok, call_refused, gormes_mcp
from log_reads import log_head, types_after

from gormes.actors.jobs.queue import JobQueue, Submitter
from gormes.actors.runs.manager import RunManager
from gormes.events.jobs import job_stream
from gormes.events.runs import RunChildFinished, RunToolCalled, run_stream
from gormes.events.sqlite import SQLiteEventStore
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor

GATEWAY_ID = f"mcp:{CLIENT_NAME}"
OPERATOR = Submitter(trust="operator", caller="cli")
TEN_YEARS_MS = 10 * 365 * 24 * 3600 * 1000


async def _submit_as_operator(db: Path, name: str = "report", data: Any = None, **options: Any) -> Any:
    async with SQLiteEventStore.open(db) as store:
        queue = await JobQueue.open(store)
        return await queue.submit(name, data, options or None, submitter=OPERATOR)


async def _job_events(db: Path, job_id: str) -> list[str]:
    async with SQLiteEventStore.open(db) as store:
        return [r.type for r in await store.read_stream(job_stream(job_id))]


async def _jobs(db: Path) -> list[Any]:
    async with SQLiteEventStore.open(db) as store:
        return await (await JobQueue.open(store)).list()


async def _audits(db: Path, operation: str) -> list[Any]:
    async with SQLiteEventStore.open(db) as store:
        return [e for e in await audit_events(store) if e.operation == operation]




def _rebuild_check(db: Path) -> None:
    result = run_gormes(db, "projections", "rebuild", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


# -- hole 2: one route into a run ---------------------------------------------------


async def test_a_gateway_may_not_submit_an_agent_job_past_run_submit(db_path: Path):
    await _submit_as_operator(db_path)  # the database exists, with one job
    head = await log_head(db_path)
    asks = [
        {"prompt": "write", "tools": ["knowledge.write"]},
        {"prompt": "peek", "model": "scripted:/etc/passwd"},
        {"prompt": "spend", "model": "openai:gpt-4o"},
        {"prompt": "as what I like", "handler": "agent", "input": {"prompt": "x"}},
    ]
    async with gormes_mcp(db_path) as client:
        refusals = [await call_refused(client, "job__submit", name="agent", data=data) for data in asks]
    for refusal in refusals:
        assert refusal.startswith("OperationDenied: ") and "use run.submit" in refusal, refusal
    assert [j.name for j in await _jobs(db_path)] == ["report"]
    audits = await _audits(db_path, "job.submit")
    assert [(a.trust, a.outcome) for a in audits] == [("gateway", "denied")] * len(asks)
    assert await types_after(db_path, head) == ["audit.operation"] * len(asks)  # nothing but the audits
    _rebuild_check(db_path)


async def test_a_gateway_may_not_choose_the_model_and_learns_nothing_about_paths(db_path: Path, tmp_path: Path):
    there = tmp_path / "there.json"
    there.write_text(json.dumps({"agents": [{"replies": [{"text": "hi"}]}]}))
    await _submit_as_operator(db_path)
    async with gormes_mcp(db_path) as client:
        exists = await call_refused(client, "run__submit", prompt="p", model=f"scripted:{there}")
        missing = await call_refused(client, "run__submit", prompt="p", model=f"scripted:{tmp_path}/nope.json")
        passwd = await call_refused(client, "run__submit", prompt="p", model="scripted:/etc/passwd")
        spend = await call_refused(client, "run__submit", prompt="p", model="openai:gpt-4o")
        tools = await call_refused(client, "run__submit", prompt="p", tools=["knowledge.write"])
    assert exists.startswith("OperationDenied: ") and "model" in exists
    assert exists.replace(str(there), "X") == missing.replace(f"{tmp_path}/nope.json", "X")
    assert passwd.replace("/etc/passwd", "X") == exists.replace(str(there), "X")
    assert spend.startswith("OperationDenied: ")
    assert tools.startswith("OperationDenied: ") and "knowledge.write" in tools
    assert [j.name for j in await _jobs(db_path)] == ["report"]
    audits = await _audits(db_path, "run.submit")
    assert [a.outcome for a in audits] == ["denied"] * 5
    _rebuild_check(db_path)


async def test_a_model_the_operator_allows_may_be_chosen_by_a_gateway(db_path: Path, tmp_path: Path):
    script = f"scripted:{tmp_path / 'allowed.json'}"
    async with gormes_mcp(db_path, env={"GORMES_GATEWAY_MODELS": f"openai:gpt-4o-mini, {script}"}) as client:
        job = await call_ok(client, "run__submit", prompt="p", model=script)
        other = await call_refused(client, "run__submit", prompt="p", model="openai:gpt-4o")
    assert job["data"]["model"] == script
    assert job["submitter"] == {"trust": "gateway", "caller": GATEWAY_ID, "scope": job["submitter"]["scope"]}
    assert other.startswith("OperationDenied: ")
    _rebuild_check(db_path)


def _call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"name": tool, "arguments": arguments}


def _script(tmp_path: Path, name: str, *agents: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"agents": list(agents)}))
    return f"scripted:{path}"


async def _child_calls(db: Path, tmp_path: Path, *calls: dict[str, Any]) -> list[RunToolCalled]:
    """A top-level run spawns a subagent (a child-agent) whose script makes `calls`;
    the tool calls the child's run recorded."""
    model = _script(
        tmp_path, "child",
        {"match": "CHILD", "replies": [{"tool_calls": list(calls)}, {"text": "tried"}]},
        {"replies": [{"tool_calls": [_call("agent.spawn", prompt="CHILD", tools=["job.submit", "run.submit"])]},
                     {"text": "parent done"}]},
    )
    async with SQLiteEventStore.open(db) as store:
        queue = await JobQueue.open(store)
        executor = Executor(default_registry(), store, jobs=queue)
        async with RunManager.open(store, executor=executor) as runs:
            outcome = await runs.run("agent", {"prompt": "p"}, model=model, tools=["job.submit", "run.submit"])
        assert outcome.status == "completed", outcome.error
        parent = [r.event for r in await store.read_stream(run_stream(outcome.run_id))]
        child_id = next(e for e in parent if isinstance(e, RunChildFinished)).child_run_id
        child = [r.event for r in await store.read_stream(run_stream(child_id))]
    assert child[0].trust == "child-agent"
    return [e for e in child if isinstance(e, RunToolCalled)]


async def test_a_child_agent_may_not_start_a_run_through_job_submit(db_path: Path, tmp_path: Path):
    await _submit_as_operator(db_path)
    calls = await _child_calls(
        db_path, tmp_path,
        _call("job.submit", name="agent", data={
            "prompt": "remember as system", "tools": ["knowledge.write", "memory.remember", "run.submit"],
            "model": "scripted:/etc/passwd"}),
        _call("run.submit", prompt="again", model="scripted:/etc/passwd"),
    )
    assert [(c.operation, c.outcome) for c in calls] == [("job.submit", "denied"), ("run.submit", "denied")]
    assert "use run.submit" in calls[0].error
    assert [j.name for j in await _jobs(db_path)] == ["report"]
    _rebuild_check(db_path)


# -- hole 3: only the owner attaches children ---------------------------------------------


async def test_a_gateway_may_not_attach_a_failing_child_to_someone_elses_job(db_path: Path):
    victim = await _submit_as_operator(db_path)
    before = await _job_events(db_path, victim.id)
    async with gormes_mcp(db_path) as client:
        refused = await call_refused(client, "job__submit", name="doomed",
                                     options={"parent_id": victim.id, "on_child_fail": "fail_parent"})
        own = await call_ok(client, "job__submit", name="mine")
        child = await call_ok(client, "job__submit", name="helper", options={"parent_id": own["id"]})
    assert refused.startswith("OperationDenied: ") and victim.id in refused
    assert "\n" not in refused
    assert await _job_events(db_path, victim.id) == before == ["job.submitted"]
    assert child["parent_id"] == own["id"]  # its own job: allowed
    assert sorted(j.name for j in await _jobs(db_path)) == ["helper", "mine", "report"]
    audits = await _audits(db_path, "job.submit")
    assert [a.outcome for a in audits] == ["denied", "ok", "ok"]
    _rebuild_check(db_path)


async def test_a_child_agent_may_not_attach_a_child_to_any_job(db_path: Path, tmp_path: Path):
    victim = await _submit_as_operator(db_path)
    calls = await _child_calls(
        db_path, tmp_path, _call("job.submit", name="doomed", options={"parent_id": victim.id}),
    )
    assert [(c.operation, c.outcome) for c in calls] == [("job.submit", "denied")]
    assert await _job_events(db_path, victim.id) == ["job.submitted"]
    assert [j.name for j in await _jobs(db_path)] == ["report"]
    _rebuild_check(db_path)


async def test_a_gateway_may_not_pause_resume_or_cancel_someone_elses_job(db_path: Path):
    victim = await _submit_as_operator(db_path)
    async with gormes_mcp(db_path) as client:
        refusals = [await call_refused(client, tool, id=victim.id)
                    for tool in ("job__pause", "job__cancel", "job__resume")]
        own = await call_ok(client, "job__submit", name="mine")
        paused = await call_ok(client, "job__pause", id=own["id"])
        cancelled = await call_ok(client, "job__cancel", id=own["id"])
    assert all(r.startswith("OperationDenied: ") for r in refusals), refusals
    assert await _job_events(db_path, victim.id) == ["job.submitted"]
    assert paused["status"] == "paused" and cancelled["cancelled"] == [own["id"]]
    _rebuild_check(db_path)


async def test_a_gateway_may_not_read_someone_elses_job(db_path: Path):
    victim = await _submit_as_operator(db_path, "report", {"api_key": "sk-secret"})
    async with gormes_mcp(db_path) as client:
        got = await call_refused(client, "job__get", id=victim.id)
        inbox = await call_refused(client, "job__inbox", id=victim.id)
        own = await call_ok(client, "job__submit", name="mine")
        listed = await call_ok(client, "job__list")
        mine = await call_ok(client, "job__get", id=own["id"])
    assert got.startswith("OperationDenied: ") and "sk-secret" not in got
    assert inbox.startswith("OperationDenied: ")
    assert [j["id"] for j in listed["jobs"]] == [own["id"]]  # the operator's job is not listed
    assert mine["name"] == "mine"
    assert [a.outcome for a in await _audits(db_path, "job.get")] == ["denied", "ok"]


async def test_a_gateway_may_not_read_someone_elses_job_through_max_waiting(db_path: Path):
    """Its max_waiting counts its own waiting jobs only (decision 0076): the
    operator's waiting job is neither returned nor counted (a refusal said one waited)."""
    victim = await _submit_as_operator(db_path, "report", {"api_key": "sk-secret"})
    async with gormes_mcp(db_path) as client:
        probe = await call_ok(client, "job__submit", name="probe", options={"max_waiting": 1})
    assert probe["id"] != victim.id and not probe["coalesced"] and "sk-secret" not in json.dumps(probe)
    _rebuild_check(db_path)


async def test_a_gateway_may_not_name_its_own_submitter(db_path: Path):
    victim = await _submit_as_operator(db_path)
    forged = {"trust": "operator", "caller": "cli", "scope": None}
    async with gormes_mcp(db_path) as client:
        top = await call_refused(client, "job__submit", name="echo", submitter=forged)
        inside = await call_refused(client, "job__submit", name="echo", options={"submitter": forged})
        steer = await call_refused(client, "job__cancel", id=victim.id, submitter=forged)
        job = await call_ok(client, "job__submit", name="echo", data={"submitter": forged})
    assert all(r.startswith("InvalidOperationInput: ") and "submitter" in r for r in (top, inside, steer))
    assert job["submitter"]["trust"] == "gateway"  # data is data, never who submitted
    assert await _job_events(db_path, victim.id) == ["job.submitted"]
    _rebuild_check(db_path)


# -- 15: options out of range are invalid input ---------------------------------------------


@pytest.mark.parametrize("options", [
    {"priority": -10**30},
    {"priority": 2**31},
    {"max_attempts": 10**20},
    {"max_attempts": 1001},
    {"delay_ms": 9223372036854775807},
    {"timeout_ms": 9223372036854775807},
    {"backoff": {"delay_ms": 10**19}},
    {"max_children": 10**19},
    {"max_waiting": 10**19},
])
async def test_options_out_of_range_are_invalid_input_not_an_overflow(db_path: Path, options: dict):
    await _submit_as_operator(db_path)
    async with gormes_mcp(db_path) as client:
        refused = await call_refused(client, "job__submit", name="echo", options=options)
    assert refused.startswith("InvalidOperationInput: "), refused
    [audit] = await _audits(db_path, "job.submit")
    assert audit.outcome == "invalid"
    result = run_gormes(db_path, "ops", "call", "job.submit", json.dumps({"name": "echo", "options": options}))
    assert result.returncode == 2 and "Overflow" not in result.stderr
    assert_one_line_error(result)
    assert [j.name for j in await _jobs(db_path)] == ["report"]
    _rebuild_check(db_path)


# -- attacks of our own -------------------------------------------------------------------


async def test_a_gateway_cannot_hijack_an_operators_idempotency_key(db_path: Path):
    async with gormes_mcp(db_path) as client:
        squatted = await call_ok(client, "job__submit", name="report", data={"send_to": "attacker"},
                                 options={"idempotency_key": "nightly-report"})
    # The operator's nightly submit must give the operator's job, not the squatter's.
    mine = await _submit_as_operator(db_path, "report", {"send_to": "ops"}, idempotency_key="nightly-report")
    assert not mine.coalesced and mine.id != squatted["id"] and mine.data == {"send_to": "ops"}
    async with gormes_mcp(db_path) as client:
        again = await call_ok(client, "job__submit", name="report", options={"idempotency_key": "nightly-report"})
    assert again["coalesced"] and again["id"] == squatted["id"]  # the gateway's own key still coalesces
    assert again["data"] == {"send_to": "attacker"}
    _rebuild_check(db_path)


async def test_a_gateway_may_not_jump_the_queue(db_path: Path):
    await _submit_as_operator(db_path)
    async with gormes_mcp(db_path) as client:
        jump = await call_refused(client, "job__submit", name="echo", options={"priority": -1})
        run_jump = await call_refused(client, "run__submit", prompt="p", priority=-(2**31))
        later = await call_ok(client, "job__submit", name="echo", options={"priority": 5})
    assert jump.startswith("OperationDenied: ") and "priority" in jump
    assert run_jump.startswith(("OperationDenied: ", "InvalidOperationInput: "))
    assert later["priority"] == 5
    _rebuild_check(db_path)


async def test_a_gateway_may_not_flood_the_queue_with_huge_data(db_path: Path):
    await _submit_as_operator(db_path)
    head = await log_head(db_path)
    async with gormes_mcp(db_path) as client:
        refused = await call_refused(client, "job__submit", name="echo", data="x" * (2 * 1024 * 1024))
        prompt = await call_refused(client, "run__submit", prompt="y" * (2 * 1024 * 1024))
    assert refused.startswith("InvalidOperationInput: ") and "data" in refused
    assert prompt.startswith("InvalidOperationInput: ")
    async with SQLiteEventStore.open(db_path) as store:
        added = await store.read_all(after_position=head)
    assert [r.type for r in added] == ["audit.operation"] * 2
    assert all(len(r.event.error or "") < 1000 for r in added)  # the refusal does not echo the data
    _rebuild_check(db_path)


async def test_an_exponential_backoff_never_overflows_the_ledger(db_path: Path):
    async with gormes_mcp(db_path) as client:
        job = await call_ok(client, "job__submit", name="flaky", options={
            "max_attempts": 1000, "backoff": {"kind": "exponential", "delay_ms": 1000, "jitter": 0.0}})
    clock = [1_700_000_000.0]
    async with SQLiteEventStore.open(db_path) as store:
        queue = await JobQueue.open(store, clock=lambda: clock[0], random=lambda: 0.5)
        for _ in range(80):  # 2^79 seconds of backoff, far past what SQLite can hold
            claimed = await queue.claim({"flaky"}, worker_id="w1")
            assert claimed is not None and claimed.id == job["id"]
            failed = await queue.fail(claimed.id, claimed.lock_token, "boom")
            assert failed.status == "delayed"
            assert failed.delay_until - int(clock[0] * 1000) <= TEN_YEARS_MS
            clock[0] = failed.delay_until / 1000 + 1
    _rebuild_check(db_path)


async def test_a_gateway_may_not_flood_the_queue_with_jobs(db_path: Path):
    await _submit_as_operator(db_path)
    async with gormes_mcp(db_path, env={"GORMES_GATEWAY_MAX_LIVE_JOBS": "3"}) as client:
        mine = [await call_ok(client, "job__submit", name="echo", data={"n": n}) for n in range(3)]
        refused = await call_refused(client, "job__submit", name="echo", data={"n": 3})
        run_refused = await call_refused(client, "run__submit", prompt="p")
        await call_ok(client, "job__cancel", id=mine[0]["id"])  # a finished job no longer counts
        again = await call_ok(client, "job__submit", name="echo", data={"n": 4})
    assert refused.startswith("OperationDenied: ") and "at most 3 unfinished jobs" in refused
    assert run_refused == refused
    assert again["data"] == {"n": 4}
    assert await _submit_as_operator(db_path, "report")  # the operator is not capped
    assert len(await _jobs(db_path)) == 6
    _rebuild_check(db_path)


async def test_a_gateway_may_not_multiply_its_job_cap_by_naming_itself_anew(db_path: Path):
    env = {"GORMES_GATEWAY_MAX_LIVE_JOBS": "2"}
    async with gormes_mcp(db_path, env=env, client_name="first") as client:
        for n in range(2):
            await call_ok(client, "job__submit", name="echo", data={"n": n})
    refusals = []
    for name in ("second", "third"):  # a client's name is its own to choose
        async with gormes_mcp(db_path, env=env, client_name=name) as client:
            refusals.append(await call_refused(client, "job__submit", name="echo", data={"n": name}))
            refusals.append(await call_refused(client, "run__submit", prompt="p"))
    assert all("'gateway' callers may hold at most 2 unfinished jobs" in r for r in refusals), refusals
    assert len(await _jobs(db_path)) == 2
    async with SQLiteEventStore.open(db_path) as store:
        audited = [a for a in await audit_events(store) if a.error]
    assert len(audited) == 4 and all("at most 2 unfinished jobs" in a.error for a in audited)


# -- the same doors on PostgreSQL ------------------------------------------------------


async def test_on_postgres_a_gateway_may_not_reach_a_run_attach_to_or_squat_on_others_jobs():
    from pg_helpers import PG_URL, fresh_schema, url_for_schema

    from gormes.events.postgres import PostgresEventStore

    with fresh_schema() as schema:
        async with PostgresEventStore.open(PG_URL, schema=schema, poll_interval=0.05) as store:
            queue = await JobQueue.open(store)
            victim = await queue.submit("report", None, {"idempotency_key": "nightly"}, submitter=OPERATOR)
            url = url_for_schema(schema)
            async with gormes_mcp(url) as client:
                agent = await call_refused(client, "job__submit", name="agent", data={"prompt": "p"})
                attach = await call_refused(client, "job__submit", name="doomed", options={"parent_id": victim.id})
                cancel = await call_refused(client, "job__cancel", id=victim.id)
                model = await call_refused(client, "run__submit", prompt="p", model="scripted:/etc/passwd")
                squat = await call_ok(client, "job__submit", name="report", options={"idempotency_key": "nightly"})
                bound = await call_refused(client, "job__submit", name="echo", options={"max_attempts": 10**20})
                listed = await call_ok(client, "job__list")
                read = await call_refused(client, "job__get", id=victim.id)
            again = await queue.submit("report", None, {"idempotency_key": "nightly"}, submitter=OPERATOR)
            assert [r.type for r in await store.read_stream(job_stream(victim.id))] == ["job.submitted"]
            audits = [e for e in await audit_events(store) if e.operation in ("job.submit", "job.cancel", "run.submit")]
    assert "use run.submit" in agent and victim.id in attach and cancel.startswith("OperationDenied: ")
    assert model.startswith("OperationDenied: ") and "/etc/passwd" not in model
    assert not squat["coalesced"] and squat["id"] != victim.id  # the operator's key is not the gateway's
    assert again.coalesced and again.id == victim.id  # and the operator's own still coalesces
    assert bound.startswith("InvalidOperationInput: ")
    assert [j["id"] for j in listed["jobs"]] == [squat["id"]] and read.startswith("OperationDenied: ")
    assert [a.outcome for a in audits] == ["denied", "denied", "denied", "denied", "ok", "invalid"]
