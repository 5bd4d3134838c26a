"""Routing a query: a healthy brain answers, anything else falls back to our index."""

from __future__ import annotations

import logging
import shutil

import pytest
from knowledge_fakes import install

from gormes.knowledge import EmptyQuery, KnowledgeRootUnreadable, default_index_path
from gormes.knowledge.brain import BrainConfig
from gormes.knowledge.search import search_knowledge

DATABASE_HIT = {"results": [{"slug": "decisions/database", "score": 0.8, "chunk_text": "SQLite in WAL mode"}]}


@pytest.mark.parametrize("state", ["healthy", "warnings"])
async def test_a_healthy_brain_answers_with_canonical_paths(tmp_path, monkeypatch, root, state):
    fake = install(tmp_path, monkeypatch, state)
    fake.answers_search(DATABASE_HIT)
    answer = await search_knowledge("what did we decide about the database?", root=root)
    assert answer.routed_to == "gbrain" and answer.fallback_reason is None
    assert [(h.path, h.trusted, h.source) for h in answer.hits] == [("decisions/database.md", True, "gbrain")]
    assert fake.calls()[1] == "search what did we decide about the database? --limit 5"
    assert not default_index_path(root).exists()  # the brain answered: our index was not needed


@pytest.mark.parametrize("state", ["error", "failing", "garbage", "missing", "slow"])
async def test_without_a_healthy_brain_our_index_answers(tmp_path, monkeypatch, root, state):
    fake = install(tmp_path, monkeypatch, state)
    fake.answers_search(DATABASE_HIT)
    answer = await search_knowledge("what did we decide about the database?", root=root,
                                    brain=BrainConfig(doctor_timeout=0.3))
    assert answer.routed_to == "fallback"
    assert answer.brain.present is False and answer.fallback_reason.startswith("no healthy gbrain")
    assert answer.hits[0].path == "decisions/database.md" and answer.hits[0].source == "fts"
    assert all(h.trusted for h in answer.hits)
    assert not any(call.startswith("search") for call in fake.calls())


async def test_a_brain_that_finds_nothing_falls_back(tmp_path, monkeypatch, root):
    install(tmp_path, monkeypatch, "healthy").answers_search({"results": []})
    answer = await search_knowledge("cron expressions", root=root)
    assert (answer.routed_to, answer.fallback_reason) == ("fallback", "gbrain found nothing")
    assert answer.hits[0].path == "decisions/scheduler.md"


async def test_untraceable_brain_hits_fall_back_and_stay_marked_untrusted(tmp_path, monkeypatch, root):
    install(tmp_path, monkeypatch, "healthy").answers_search("[0.9] imported/chat-log -- we use SQLite\n")
    answer = await search_knowledge("sqlite", root=root)
    assert answer.routed_to == "fallback"
    assert answer.fallback_reason == "no gbrain hit traces to a markdown file"
    assert [(h.path, h.trusted) for h in answer.hits] == [("decisions/database.md", True), ("imported/chat-log", False)]


async def test_a_failing_brain_search_falls_back_and_says_why(tmp_path, monkeypatch, root):
    fake = install(tmp_path, monkeypatch, "healthy")
    (fake.dir / "search.out").unlink()  # `cat` fails: the fake still exits 0 with nothing on stdout
    answer = await search_knowledge("scheduler", root=root)
    assert answer.routed_to == "fallback" and answer.hits[0].path == "decisions/scheduler.md"


async def test_the_fallback_is_announced_once_per_process(tmp_path, monkeypatch, root, caplog):
    install(tmp_path, monkeypatch, "missing")
    with caplog.at_level(logging.WARNING, logger="gormes.knowledge"):
        first = await search_knowledge("database", root=root)
        second = await search_knowledge("scheduler", root=root)
    notices = [r for r in caplog.records if r.name == "gormes.knowledge"]
    assert len(notices) == 1 and "falls back to the local markdown index" in notices[0].getMessage()
    assert first.fallback_reason == second.fallback_reason  # every answer still says why


async def test_exact_strings_are_found_by_grep(tmp_path, monkeypatch, root):
    install(tmp_path, monkeypatch, "missing")
    answer = await search_knowledge('where is "job.claimed" used', root=root)
    assert (answer.hits[0].path, answer.hits[0].source, answer.hits[0].line) == ("decisions/events.md", "grep", 3)


async def test_removing_the_index_loses_nothing(tmp_path, monkeypatch, root):
    install(tmp_path, monkeypatch, "missing")
    before = await search_knowledge("postgres scale-out", root=root)
    index = default_index_path(root)
    assert index.exists()
    index.unlink()
    after = await search_knowledge("postgres scale-out", root=root)
    assert after.hits == before.hits and after.hits[0].path == "decisions/database.md"


async def test_a_damaged_index_is_rebuilt_from_the_files(tmp_path, monkeypatch, root):
    install(tmp_path, monkeypatch, "missing")
    index = default_index_path(root)
    index.parent.mkdir(parents=True)
    index.write_bytes(b"this is not a database at all" * 100)
    answer = await search_knowledge("cronsim", root=root)
    assert answer.hits[0].path == "decisions/scheduler.md"


async def test_edits_and_removals_of_files_reach_the_index(tmp_path, monkeypatch, root):
    install(tmp_path, monkeypatch, "missing")
    assert (await search_knowledge("kafka", root=root)).hits == []
    (root / "decisions" / "queue.md").write_text("# Queue\n\nWe rejected Kafka: the log is SQLite.\n")
    assert [h.path for h in (await search_knowledge("kafka", root=root)).hits] == ["decisions/queue.md"]
    (root / "decisions" / "queue.md").unlink()
    assert (await search_knowledge("kafka", root=root)).hits == []


@pytest.mark.parametrize("query", ["", "   \n"])
async def test_an_empty_query_is_refused(root, query):
    with pytest.raises(EmptyQuery, match="the query is empty"):
        await search_knowledge(query, root=root)


async def test_an_unreadable_root_is_one_clear_error(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, "healthy")
    with pytest.raises(KnowledgeRootUnreadable, match="knowledge root not found"):
        await search_knowledge("database", root=tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(KnowledgeRootUnreadable, match="not a directory"):
        await search_knowledge("database", root=tmp_path / "file")


async def test_a_query_of_only_punctuation_finds_nothing_without_error(tmp_path, monkeypatch, root):
    install(tmp_path, monkeypatch, "missing")
    assert (await search_knowledge("?!", root=root)).hits == []


async def test_hidden_directories_are_not_knowledge(tmp_path, monkeypatch, root):
    install(tmp_path, monkeypatch, "missing")
    (root / ".git").mkdir()
    (root / ".git" / "zebra.md").write_text("# zebra\n")
    shutil.copy(root / "notes.md", root / "copy.md")
    assert (await search_knowledge("zebra", root=root)).hits == []
