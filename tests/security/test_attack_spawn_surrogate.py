"""A run handler's `ctx.spawn` given what no event can record (decision 0078).

A Python handler's str can hold a lone surrogate (U+D800-U+DFFF alone: `os.listdir`
makes one of a file name whose bytes are not UTF-8), and its input can hold a value
that is no JSON at all. `ctx.spawn` digested the spawn for its audit record first,
and the digest raised `UnicodeEncodeError` (or `TypeError`) into the handler, with
no audit record: the handler, which expects `SpawnRefused`, failed the run. Every
other door refuses such input as invalid and audits it (decision 0077). A spawn now
does too: `SpawnRefused` naming the place, audited `invalid`, nothing else written,
and replay refuses it again at the same place, so the run replays exactly. So does
a tool or model name that is not a string, which was recorded in `run.child_spawned`
and then made the run unreadable ("recorded by an incompatible gormes") to replay.
"""

from __future__ import annotations

import os
from typing import Any

from mcp_helpers import audit_events

from gormes.actors.runs.context import RunHandlerRegistry, SpawnRefused, run_handler
from gormes.actors.runs.manager import RunManager
from gormes.events.runs import RunChildSpawned, RunLogged, run_stream

handlers = RunHandlerRegistry()
LATIN_1_NAME = os.fsdecode(b"caf\xe9.txt")  # "caf\udce9.txt", as os.listdir gives it

CYCLE: dict[str, Any] = {}
CYCLE["self"] = CYCLE

# (what the spawn is given, what its refusal names)
BAD_SPAWNS: list[tuple[dict[str, Any], str]] = [
    ({"handler": "leaf\ud800", "input": {}}, "handler holds U+D800, a lone surrogate"),
    ({"handler": "leaf", "input": {"path": LATIN_1_NAME}}, "input[] holds U+DCE9, a lone surrogate"),
    ({"handler": "leaf", "input": {LATIN_1_NAME: 1}}, "input key holds U+DCE9, a lone surrogate"),
    ({"handler": "leaf", "input": {}, "tools": ["fs.read", "\udc80"]}, "tools[1] holds U+DC80, a lone surrogate"),
    ({"handler": "leaf", "input": {}, "model": "m\udfff"}, "model holds U+DFFF, a lone surrogate"),
    ({"handler": "leaf", "input": {"x": object()}},
     "input is not JSON: Encoding objects of type object is unsupported"),
    ({"handler": "leaf", "input": {1: "one"}}, "input is not JSON: Only dicts with str keys are supported"),
    # recorded, and then unreadable: `run.child_spawned`'s fields are strings
    ({"handler": "leaf", "input": {}, "tools": ["fs.read", 5]}, "tools[1] is not a string"),
    ({"handler": "leaf", "input": {}, "model": 3}, "model is not a string"),
    ({"handler": None, "input": {}}, "handler is not a string"),
    ({"handler": "leaf", "input": CYCLE}, "input is not JSON: it holds itself"),  # RecursionError
]


@run_handler("leaf", registry=handlers)
async def leaf(ctx: Any, input: Any) -> Any:
    return input


@run_handler("spawns_the_unrecordable", registry=handlers)
async def spawns_the_unrecordable(ctx: Any, input: Any) -> list[Any]:
    """Each bad spawn, caught as any refused spawn is and logged; then a good one."""
    seen: list[Any] = []
    for asked, _ in BAD_SPAWNS:
        try:
            await ctx.spawn(asked["handler"], asked["input"], tools=asked.get("tools"), model=asked.get("model"))
            seen.append("started")
        except SpawnRefused as exc:
            await ctx.log(str(exc))
            seen.append(str(exc))
    child = await ctx.spawn("leaf", {"n": 1})
    seen.append((await child.result()).result)
    return seen


async def test_a_spawn_no_event_could_record_is_refused_audited_invalid_and_replays_exactly(store):
    from gormes.actors.runs.recorded import DatabaseRuns
    from gormes.actors.runs.replay import replay

    async with RunManager.open(store, handlers=handlers) as runs:
        outcome = await runs.run("spawns_the_unrecordable", {})
    assert outcome.status == "completed", outcome.error
    *refusals, child_result = outcome.result
    assert child_result == {"n": 1}
    for refusal, (_, named) in zip(refusals, BAD_SPAWNS, strict=True):
        assert refusal.startswith("invalid spawn: ") and named in refusal, refusal
        assert refusal.encode(), "the refusal names the place, never holds it"

    spawns = [a for a in await audit_events(store) if a.operation == "agent.spawn"]
    assert [(a.outcome, a.allowed) for a in spawns] == [("invalid", False)] * len(BAD_SPAWNS) + [("ok", True)]
    for audit, refusal in zip(spawns, refusals):
        assert audit.error == f"InvalidArguments: {refusal}", audit.error
        assert audit.input_sha256 is None  # there is no JSON to digest
        assert audit.caller == f"run-{outcome.run_id}" and audit.audit_kind == "run.spawn"

    recorded = [r.event for r in await store.read_stream(run_stream(outcome.run_id))]
    assert [e.message for e in recorded if isinstance(e, RunLogged)] == refusals
    assert [e.input for e in recorded if isinstance(e, RunChildSpawned)] == [{"n": 1}], "only the good spawn"
    assert not [e for e in recorded if e.type == "run.spawn_refused"], "nothing of the refusal on the stream"

    before = len(await store.read_all())
    with DatabaseRuns(store.path) as source:
        report = await replay(source, outcome.run_id, registry=None, handlers=handlers)
    assert report.tree_exact, report
    assert len(await store.read_all()) == before, "replay wrote nothing"

