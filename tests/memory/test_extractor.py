"""The extractor through the scripted provider, and the memory operations' trust rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gormes.events.jobs import Tokens
from gormes.events.runs import (
    InboxItem,
    RecordedReply,
    RunInboxRead,
    RunLlmTurn,
    RunStarted,
    run_stream,
)
from gormes.memory.extractor import (
    EXTRACTOR_VERSION,
    ExtractionError,
    parse_extraction,
    run_turns,
)
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, OperationDenied
from gormes.recall.api import recall_in_store

EXTRACTION = {
    "entities": [{"name": "Ada Lovelace", "kind": "person"}],
    "relationships": [
        {"subject": "Ada Lovelace", "predicate": "works at", "object": "Acme", "confidence": 0.9, "turn": "input",
         "evidence": "I am Ada and I work at Acme"},
        {"subject": "Ada Lovelace", "predicate": "owes", "object": "Mallory", "confidence": 0.5,
         "turn": "seq:1:m1"},
    ],
    "facts": [{"text": "Ada prefers tea", "subject": "Ada Lovelace", "confidence": 0.8, "turn": "seq:2"}],
}


def script(tmp_path: Path, reply: str) -> str:
    path = tmp_path / "extract.json"
    path.write_text(json.dumps({"agents": [{"replies": [{"text": reply}]}]}))
    return f"scripted:{path}"


async def record_run(store, run_id: str, trust: str) -> None:
    await store.append(run_stream(run_id), [
        RunStarted(run_id=run_id, handler="agent", handler_version="x", input="I am Ada and I work at Acme", trust=trust),
        RunInboxRead(seq=1, messages=(InboxItem(id="m1", sender="gw-7", payload="Ada owes Mallory money", sent_at=0),)),
        RunLlmTurn(seq=2, request_hash="h", model="m", message_count=2,
                   reply=RecordedReply(content="Noted: Ada prefers tea."), usage=Tokens()),
    ])


def operator() -> Caller:
    return Caller(trust="operator", id="cli")


async def test_turn_trust_follows_the_text(store):
    await record_run(store, "r1", "operator")
    turns = run_turns(await store.read_stream(run_stream("r1")))
    assert [(t.id, t.trust) for t in turns] == [("input", "operator"), ("seq:1:m1", "gateway"), ("seq:2", "gateway")]


async def test_extract_through_the_scripted_provider(store, tmp_path: Path):
    await record_run(store, "r1", "operator")
    executor = Executor(default_registry(), store)
    result = await executor.call("memory.extract", {"run_id": "r1", "model": script(tmp_path, json.dumps(EXTRACTION)),
                                                    "scope": "chat:a"}, operator())
    assert (result.relationships, result.facts, result.unreviewed) == (2, 1, 2)
    hits = {h.text: h for h in (await recall_in_store(store, "Ada", mode="graph", scope="chat:a")).hits}
    assert hits["Ada Lovelace works_at Acme"].review_state == "trusted"
    assert hits["Ada Lovelace works_at Acme"].origin == "run r1 turn input"
    assert hits["Ada Lovelace owes Mallory"].review_state == "unreviewed"
    assert hits["Ada prefers tea"].review_state == "unreviewed"  # the reply had seen gateway text
    across = await recall_in_store(store, "Ada", mode="graph", scope="chat:z", cross_scope=True)
    assert [h.text for h in across.hits] == ["Ada Lovelace works_at Acme"]
    rows = await store.read_with(lambda log: log.conn.execute(
        "SELECT DISTINCT extractor_version, origin_run FROM memory_relationships").fetchall())
    assert rows == [(EXTRACTOR_VERSION, "r1")]


async def test_a_gateway_run_yields_only_unreviewed_memory(store, tmp_path: Path):
    await record_run(store, "r2", "gateway")
    executor = Executor(default_registry(), store)
    result = await executor.call("memory.extract", {"run_id": "r2", "model": script(tmp_path, json.dumps(EXTRACTION)),
                                                    "scope": "chat:g"}, operator())
    assert result.unreviewed == result.relationships + result.facts == 3


async def test_extract_is_not_for_remote_callers_or_models(store, tmp_path: Path):
    executor = Executor(default_registry(), store)
    for trust in ("gateway", "child-agent"):
        with pytest.raises(OperationDenied):
            await executor.call("memory.extract", {"run_id": "r1", "model": "scripted:x"}, Caller(trust=trust, id="gw-1"))
    assert "memory.extract" not in {t.name for t in default_registry().tool_schemas("system")}


def test_a_reply_that_is_not_an_extraction_is_one_clear_error():
    with pytest.raises(ExtractionError, match="not an extraction"):
        parse_extraction("sure! Ada works at Acme")
    assert parse_extraction("```json\n{\"facts\": []}\n```").facts == ()


async def test_remote_callers_are_pinned_to_their_chat(store):
    executor = Executor(default_registry(), store)
    gateway = Caller(trust="gateway", id="gw-1")
    out = await executor.call("memory.remember", {"fact": "I like jazz", "subject": "me"}, gateway)
    assert out.scope == "chat:gw-1" and out.review_state == "unreviewed"
    with pytest.raises(OperationDenied):
        await executor.call("memory.recall", {"query": "jazz", "scope": "chat:other"}, gateway)
    with pytest.raises(OperationDenied):
        await executor.call("memory.recall", {"query": "jazz", "cross_scope": True}, gateway)
    mine = await executor.call("memory.recall", {"query": "jazz"}, gateway)
    assert [h.text for h in mine.hits] == ["I like jazz"]
    other = await executor.call("memory.recall", {"query": "jazz"}, Caller(trust="gateway", id="gw-2"))
    assert other.hits == ()
