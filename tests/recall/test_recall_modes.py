"""Recall over a real store: score breakdowns and reasons, privacy, review, forgetting."""

from __future__ import annotations

import pytest

from gormes.events.memory import Origin
from gormes.memory.writer import MemoryTarget, MemoryWriter, Source
from gormes.recall.api import (
    CrossScopeDenied,
    EmptyQuery,
    InvalidScope,
    recall_in_store,
)

MANUAL = Source(origin=Origin(artifact="cli"))
GATEWAY = Source(origin=Origin(run_id="run-9", turn_id="seq:1"), kind="extracted", trust="gateway",
                 extractor_version="memory-extractor/1", confidence=0.7)


def clock_from(start: float = 1_700_000_000.0):
    now = [start]

    def clock() -> float:
        now[0] += 3600.0
        return now[0]

    return clock


@pytest.fixture
async def memory(store):
    writer = MemoryWriter(store, clock=clock_from())
    await writer.relate("chat:a", "Ada Lovelace", "works at", "Acme Corp", MANUAL)
    await writer.relate("chat:a", "Acme Corp", "located in", "London", MANUAL)
    await writer.add_fact("chat:a", "Ada prefers green tea in the morning", MANUAL, subject="Ada Lovelace")
    await writer.add_fact("chat:a", "London office opens at nine", MANUAL, subject="London")
    # chat:b knows other things about the same names
    await writer.add_fact("chat:b", "Ada's salary is secret", MANUAL, subject="Ada Lovelace")
    await writer.relate("chat:b", "Acme Corp", "acquired", "Secret Startup", MANUAL)
    await writer.add_fact("chat:b", "Secret Startup builds rockets", MANUAL, subject="Secret Startup")
    return writer


def texts(result) -> list[str]:
    return [h.text for h in result.hits]


@pytest.mark.parametrize("mode", ["lexical", "graph", "fused"])
async def test_every_hit_has_its_score_breakdown_and_why(store, memory, mode):
    result = await recall_in_store(store, "where does Ada work", mode=mode, scope="chat:a")
    assert result.hits
    for hit in result.hits:
        assert hit.why and all(w.reason for w in hit.why)
        assert getattr(hit.scores, "fused" if mode == "fused" else mode) is not None
        for why in hit.why:
            if why.mode == "graph":
                assert why.seed == "ada-lovelace" and why.seed_name == "Ada Lovelace"
                assert len(why.path) == why.depth or (why.depth and len(why.path) == why.depth)
            if why.mode == "lexical":
                assert "ada" in why.matched_terms or "work" in why.matched_terms


async def test_graph_walks_two_hops_with_the_path_in_why(store, memory):
    result = await recall_in_store(store, "Ada", mode="graph", scope="chat:a")
    by_text = {h.text: h for h in result.hits}
    london = by_text["Acme Corp located_in London"].why[0]
    assert london.depth == 2
    assert [(s.subject, s.predicate, s.object) for s in london.path] == [
        ("ada-lovelace", "works_at", "acme-corp"), ("acme-corp", "located_in", "london")]
    assert by_text["Ada Lovelace works_at Acme Corp"].score > by_text["Acme Corp located_in London"].score
    assert "London office opens at nine" in by_text  # a fact two hops away


async def test_fused_scores_combine_the_modes(store, memory):
    result = await recall_in_store(store, "Ada tea", mode="fused", scope="chat:a")
    top = result.hits[0]
    assert top.text == "Ada prefers green tea in the morning"
    assert top.scores.lexical is not None and top.scores.graph is not None and top.scores.fused.rank == 1
    assert {w.mode for w in top.why} == {"lexical", "graph"}


@pytest.mark.parametrize("mode", ["lexical", "graph", "fused"])
async def test_no_leak_across_chats_not_even_through_the_graph(store, memory, mode):
    for query in ("Ada salary", "Acme", "Secret Startup rockets"):
        result = await recall_in_store(store, query, mode=mode, scope="chat:a")
        assert {h.scope for h in result.hits} <= {"chat:a"}, (query, texts(result))
        assert not any("ecret" in t for t in texts(result))


async def test_cross_scope_is_for_the_operator_only(store, memory):
    widened = await recall_in_store(store, "Ada salary", mode="fused", scope="chat:a", cross_scope=True)
    assert "Ada's salary is secret" in texts(widened) and widened.scopes == ("*",)
    for trust in ("gateway", "child-agent", "system"):
        with pytest.raises(CrossScopeDenied):
            await recall_in_store(store, "Ada", scope="chat:a", cross_scope=True, trust=trust)


async def test_untrusted_edges_act_only_in_their_scope_until_promoted(store, memory):
    edge = await memory.relate("chat:b", "Ada Lovelace", "owes money to", "Mallory", GATEWAY)
    assert edge.review_state == "unreviewed"
    own = await recall_in_store(store, "Mallory", mode="graph", scope="chat:b")
    assert texts(own)[0] == "Ada Lovelace owes_money_to Mallory" and own.hits[0].review_state == "unreviewed"
    across = await recall_in_store(store, "Ada", mode="graph", scope="chat:a", cross_scope=True)
    assert "Ada Lovelace owes_money_to Mallory" not in texts(across)

    target = MemoryTarget(id=edge.relationship_id, kind="relationship", scope="chat:b")
    await memory.review(target, "promoted")
    across = await recall_in_store(store, "Ada", mode="graph", scope="chat:a", cross_scope=True)
    assert "Ada Lovelace owes_money_to Mallory" in texts(across)
    chat_a_only = await recall_in_store(store, "Ada", mode="graph", scope="chat:a")
    assert "Ada Lovelace owes_money_to Mallory" not in texts(chat_a_only)  # promotion is not publication

    await memory.review(target, "rejected")
    for scope, cross in (("chat:b", False), ("chat:a", True)):
        result = await recall_in_store(store, "Ada Mallory", mode="fused", scope=scope, cross_scope=cross)
        assert "Ada Lovelace owes_money_to Mallory" not in texts(result)


async def test_forgotten_leaves_recall_but_the_log_keeps_it(store, memory):
    fact = await memory.add_fact("chat:a", "Ada's door code is 1234", MANUAL, subject="Ada Lovelace")
    assert "Ada's door code is 1234" in texts(await recall_in_store(store, "door code", mode="lexical", scope="chat:a"))
    await memory.forget(MemoryTarget(id=fact.fact_id, kind="fact", scope="chat:a"), reason="secret")
    for mode in ("lexical", "graph", "fused"):
        assert "Ada's door code is 1234" not in texts(await recall_in_store(store, "Ada door code", mode=mode, scope="chat:a"))
    types = [r.type for r in await store.read_stream("memory-chat:a")]
    assert "memory.fact_recorded" in types and types[-1] == "memory.forgotten"


async def test_a_stale_fact_ranks_below_what_replaced_it(store, memory):
    old = await memory.add_fact("chat:a", "Ada lives in Paris", MANUAL, subject="Ada Lovelace")
    await memory.add_fact("chat:a", "Ada lives in Rome", MANUAL, subject="Ada Lovelace", supersedes=[old.fact_id])
    result = await recall_in_store(store, "where does Ada live", mode="lexical", scope="chat:a")
    order = texts(result)
    assert order.index("Ada lives in Rome") < order.index("Ada lives in Paris")
    assert next(h for h in result.hits if h.text == "Ada lives in Paris").stale


async def test_bad_input_is_refused(store, memory):
    with pytest.raises(EmptyQuery):
        await recall_in_store(store, "   ", scope="chat:a")
    with pytest.raises(EmptyQuery):
        await recall_in_store(store, "?!", scope="chat:a")
    with pytest.raises(InvalidScope):
        await recall_in_store(store, "Ada", scope="everything")
