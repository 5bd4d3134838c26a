"""A gateway's U+0000 (NUL) in a string the log keeps as text (decision 0074).

SQLite's text holds NUL; PostgreSQL's cannot. A gateway's `job.submit` named
`"ec\\u0000ho"`, or with NUL in an idempotency, debounce or concurrency key, was
recorded on SQLite, and its `memory.remember` of such a fact, entity or relation
too, as was any remember by a client whose self-declared name held one (its
scope). Once the operator moved that log to PostgreSQL (`gormes migrate`, or
`export` and `import`), the job ledger could not be built ("PostgreSQL text fields
cannot contain NUL (0x00) bytes"): `gormes jobs list`, the workers and every
write there failed; the memory projection stopped the same way. Such a string
field is now invalid input, refused before anything is written and audited; a
client's name reads U+0000 as U+FFFD. Free JSON (a job's data) may still carry
U+0000: the log's JSON escapes it, and PostgreSQL's reads replace it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_gormes
from log_reads import log_head, types_after
from mcp_helpers import audit_events, call_ok, call_refused, gormes_mcp
from pg_helpers import fresh_schema, url_for_schema

from gormes.events.sqlite import SQLiteEventStore
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, InvalidOperationInput
from gormes.tools.builtin import default_registry
from gormes.tools.memory import own_scope

# Each call a gateway could make with a NUL where a text column keeps it, and the
# field the refusal names.
NUL_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("job__submit", {"name": "ec\x00ho"}, "input.name"),
    ("job__submit", {"name": "echo", "options": {"idempotency_key": "k\x00"}}, "input.options.idempotency_key"),
    ("job__submit", {"name": "echo", "options": {"debounce_key": "k\x00", "debounce_ms": 10}},
     "input.options.debounce_key"),
    ("job__submit", {"name": "echo", "options": {"concurrency_key": "k\x00"}}, "input.options.concurrency_key"),
    ("memory__remember", {"fact": "a \x00 fact"}, "input.fact"),
    ("memory__remember", {"fact": "f", "subject": "s\x00"}, "input.subject"),
    ("memory__remember", {"relation": {"subject": "a", "predicate": "p\x00", "object": "o"}},
     "input.relation.predicate"),
    ("run__submit", {"prompt": "p\x00"}, "input.prompt"),
]
NUL_CLIENT = "bad\x00client"


async def _gateway_tries_every_nul(db: Path) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """The refusals' lines, a job whose free JSON data holds NUL, and a fact
    remembered by a client whose name holds one."""
    async with gormes_mcp(db) as client:
        refused = [await call_refused(client, tool, **arguments) for tool, arguments, _ in NUL_CALLS]
        job = await call_ok(client, "job__submit", name="echo", data={"text": "a\x00b"})
    async with gormes_mcp(db, client_name=NUL_CLIENT) as client:
        remembered = await call_ok(client, "memory__remember", fact="from a client with a NUL in its name")
    return refused, job, remembered


async def test_a_gateways_nul_in_a_text_field_is_refused_and_audited(db_path: Path):
    head = await log_head(db_path)
    refused, job, remembered = await _gateway_tries_every_nul(db_path)
    for line, (_, _, field) in zip(refused, NUL_CALLS, strict=True):
        assert line.startswith("InvalidOperationInput: ") and f"{field} holds U+0000 (NUL)" in line, line
    assert job["data"] == {"text": "a\x00b"}, "free JSON keeps its NUL"
    assert remembered["scope"] == own_scope("mcp:bad\ufffdclient")
    async with SQLiteEventStore.open(db_path) as store:
        audited = [(a.operation, a.outcome) for a in await audit_events(store)]
    assert audited == [
        *[(tool.replace("__", "."), "invalid") for tool, _, _ in NUL_CALLS],
        ("job.submit", "ok"), ("memory.remember", "ok"),
    ]
    written = [t for t in await types_after(db_path, head) if t != "audit.operation"]
    assert written == ["job.submitted", "memory.fact_recorded"], "only the two calls taken wrote anything"


async def test_the_gateways_log_still_moves_to_postgresql(db_path: Path):
    """What the operator does next: the log, with whatever the gateway sent, moved to
    PostgreSQL, whose job queue and projections then work."""
    await _gateway_tries_every_nul(db_path)
    with fresh_schema() as schema:
        url = url_for_schema(schema)
        moved = run_gormes(db_path, "migrate", "--from", str(db_path), "--to", url)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        jobs = run_gormes(url, "jobs", "list", "--json")
        assert jobs.returncode == 0, jobs.stderr
        assert [(job["name"], job["data"]) for job in json.loads(jobs.stdout)] == [("echo", {"text": "a\x00b"})]
        rebuilt = run_gormes(url, "projections", "rebuild")
        assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr


@pytest.mark.parametrize("raw", ['{"fact": "x\\u0000y"}', b'{"fact": "x\\u0000y"}', {"fact": "x\x00y"}],
                         ids=["text", "bytes", "parsed"])
@pytest.mark.parametrize("trust", ["gateway", "child-agent", "operator"])
async def test_every_caller_is_refused_a_nul_in_a_text_field(store, trust: str, raw: object):
    """The executor refuses it, so a run's tool call (a gateway's or a subagent's
    model asking for it) and the operator's CLI are refused alike, however the input
    comes (JSON text, which writes NUL only as an escape, or parsed); nothing runs."""
    caller = Caller(trust=trust, id="run-1" if trust != "operator" else "cli", run_id=None)
    executor = Executor(default_registry(), store)
    with pytest.raises(InvalidOperationInput, match=r"input\.fact holds U\+0000"):
        await executor.call("memory.remember", raw, caller)
    assert [r.type for r in await store.read_all()] == ["audit.operation"]
    assert (await audit_events(store))[0].outcome == "invalid"

