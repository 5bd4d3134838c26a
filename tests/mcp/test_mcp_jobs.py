"""Submitting and steering jobs through `gormes mcp`, checked in the real log."""

from __future__ import annotations

from mcp_helpers import CLIENT_NAME, audit_events, call_ok, call_refused, gormes_mcp

from gormes.actors.jobs.queue import JobQueue, Submitter
from gormes.tools.builtin import default_registry
from gormes.tools.memory import own_scope


async def test_an_agent_run_is_submitted_got_paused_resumed_and_cancelled(db_path, store):
    async with gormes_mcp(db_path) as client:
        job = await call_ok(client, "run__submit", prompt="Summarize the README", max_iterations=3)
        got = await call_ok(client, "job__get", id=job["id"])
        listed = await call_ok(client, "job__list", status="waiting")
        paused = await call_ok(client, "job__pause", id=job["id"])
        resumed = await call_ok(client, "job__resume", id=job["id"])
        cancelled = await call_ok(client, "job__cancel", id=job["id"])
        refused = await call_refused(client, "job__pause", id=job["id"])

    assert (job["name"], job["status"]) == ("agent", "waiting")
    gateway_tools = [t.name for t in default_registry().tool_schemas("gateway")]
    assert job["data"] == {
        "handler": "agent", "prompt": "Summarize the README", "max_iterations": 3, "tools": gateway_tools,
    }
    assert got["id"] == job["id"] and [j["id"] for j in listed["jobs"]] == [job["id"]]
    assert (paused["status"], resumed["status"]) == ("paused", "waiting")
    assert cancelled == {"cancelled": [job["id"]]}
    assert refused.startswith("InvalidTransition")
    # the queue in the log agrees
    queue = await JobQueue.open(store)
    assert (await queue.get(job["id"])).status == "cancelled"
    events = await audit_events(store)
    assert [(e.operation, e.outcome) for e in events] == [
        ("run.submit", "ok"), ("job.get", "ok"), ("job.list", "ok"), ("job.pause", "ok"),
        ("job.resume", "ok"), ("job.cancel", "ok"), ("job.pause", "invalid"),  # InvalidTransition: bad input, not a failure
    ]
    assert {(e.caller, e.trust) for e in events} == {(f"mcp:{CLIENT_NAME}", "gateway")}


async def test_a_run_may_not_be_given_tools_beyond_the_callers_trust_class(db_path, store):
    async with gormes_mcp(db_path) as client:
        refused = await call_refused(client, "run__submit", prompt="clean up", tools=["fs.read", "shell.run"])
        listed = await call_ok(client, "job__list")
    assert refused == "OperationDenied: a 'gateway' caller may not give a run the tools shell.run"
    assert listed == {"jobs": [], "next": None}  # the one page: no more follow
    assert [(e.operation, e.outcome) for e in await audit_events(store)] == [
        ("run.submit", "denied"), ("job.list", "ok"),
    ]


async def test_a_jobs_inbox_is_read_and_only_its_owner_may_write_to_it(db_path, store):
    queue = await JobQueue.open(store)
    # The client's own job (a gateway reads only its own jobs' inboxes).
    own = Submitter(trust="gateway", caller=f"mcp:{CLIENT_NAME}", scope=own_scope(f"mcp:{CLIENT_NAME}"))
    job = await queue.submit("agent", {"prompt": "wait for orders"}, submitter=own)
    theirs = await queue.submit("agent", {"prompt": "the operator's"})
    await queue.send(job.id, {"order": "stop early"})
    async with gormes_mcp(db_path) as client:
        inbox = await call_ok(client, "job__inbox", id=job.id)
        refused = await call_refused(client, "job__send", id=job.id, payload="hello")
        missing = await call_refused(client, "job__inbox", id="no-such-job")
        not_its_own = await call_refused(client, "job__inbox", id=theirs.id)
    assert not_its_own.startswith("OperationDenied: ")
    assert inbox["job_id"] == job.id
    assert [(m["sender"], m["payload"]) for m in inbox["messages"]] == [("operator", {"order": "stop early"})]
    # the queue's rule: only an operator or the job's parent writes to a job's inbox
    assert refused == (f"OperationDenied: only job {job.id}'s parent or an operator may send to it,"
                       f" not 'mcp:{CLIENT_NAME}'")
    # audited as the refusal it is (it was `invalid`, allowed: what refusal counts missed)
    [sent] = [e for e in await audit_events(store) if e.operation == "job.send"]
    assert sent.outcome == "denied" and sent.error.startswith("OperationDenied: only job "), sent
    assert missing == "JobNotFound: no job no-such-job"
    assert len(await queue.inbox(job.id)) == 1
