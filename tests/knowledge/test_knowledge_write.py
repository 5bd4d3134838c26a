"""knowledge.write: markdown first, then the indexes."""

from __future__ import annotations

import pytest
from knowledge_fakes import install

from gormes.knowledge import InvalidKnowledgePath, KnowledgeRootUnreadable
from gormes.knowledge.search import search_knowledge
from gormes.knowledge.write import write_knowledge


async def test_a_write_reaches_the_file_then_our_index(tmp_path, monkeypatch, root):
    fake = install(tmp_path, monkeypatch, "missing")
    result = await write_knowledge("decisions/queue.md", "# Queue\n\nWe rejected Kafka.", root=root)
    assert (result.path, result.created, result.reindexed, result.problems) == ("decisions/queue.md", True, ["fts"], [])
    assert (root / "decisions" / "queue.md").read_text() == "# Queue\n\nWe rejected Kafka.\n"
    answer = await search_knowledge("kafka", root=root)
    assert [h.path for h in answer.hits] == ["decisions/queue.md"]
    assert fake.calls() == []


async def test_with_a_brain_present_the_write_is_synced(tmp_path, monkeypatch, root):
    fake = install(tmp_path, monkeypatch, "warnings")
    result = await write_knowledge("decisions/queue.md", "# Queue\n", root=root)
    assert result.reindexed == ["gbrain", "fts"] and result.brain.present
    assert fake.calls() == ["doctor --json", f"sync --repo {root}"]


async def test_a_failing_sync_is_reported_and_the_file_is_kept(tmp_path, monkeypatch, root):
    fake = install(tmp_path, monkeypatch, "healthy")
    fake.sync_fails()
    result = await write_knowledge("decisions/queue.md", "# Queue\n", root=root)
    assert result.reindexed == ["fts"] and result.problems == ["gbrain sync: failed (exit 4)"]
    assert (root / "decisions" / "queue.md").read_text() == "# Queue\n"


async def test_append_keeps_what_was_there(tmp_path, monkeypatch, root):
    install(tmp_path, monkeypatch, "missing")
    result = await write_knowledge("notes.md", "- Later: twice a second was too often.", root=root, append=True)
    assert result.created is False
    assert (root / "notes.md").read_text() == (
        "# Notes\n\nThe dashboard refreshes twice a second.\n- Later: twice a second was too often.\n")


async def test_the_first_write_creates_the_root(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, "missing")
    fresh = tmp_path / "project" / ".writ"
    await write_knowledge("first.md", "# First\n", root=fresh)
    assert (fresh / "first.md").is_file()


@pytest.mark.parametrize("path", ["../escape.md", "/etc/passwd.md", "notes.txt", ".hidden/x.md", "", "a/../../b.md"])
async def test_paths_outside_the_root_or_not_markdown_are_refused(tmp_path, monkeypatch, root, path):
    install(tmp_path, monkeypatch, "missing")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if "fake-bin" not in p.parts)
    with pytest.raises(InvalidKnowledgePath):
        await write_knowledge(path, "# x\n", root=root)
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if "fake-bin" not in p.parts)
    assert after == before


async def test_a_root_that_is_a_file_is_refused(tmp_path, monkeypatch):
    install(tmp_path, monkeypatch, "missing")
    (tmp_path / "root").write_text("x")
    with pytest.raises(KnowledgeRootUnreadable):
        await write_knowledge("a.md", "# a\n", root=tmp_path / "root")
    assert (tmp_path / "root").read_text() == "x"


async def test_a_link_inside_the_root_is_written_at_its_target(tmp_path, monkeypatch, root):
    install(tmp_path, monkeypatch, "missing")
    (root / "db.md").symlink_to("decisions/database.md")
    (root / "later").symlink_to("decisions")
    result = await write_knowledge("db.md", "Revisited in 2026.", root=root, append=True)
    assert (result.path, result.created) == ("decisions/database.md", False)
    assert (root / "db.md").is_symlink()
    assert (root / "decisions" / "database.md").read_text().endswith("Postgres is the scale-out backend.\nRevisited in 2026.\n")
    nested = await write_knowledge("later/new/deep/x.md", "# X", root=root)
    assert (nested.path, nested.created) == ("decisions/new/deep/x.md", True)
    assert (root / "decisions" / "new" / "deep" / "x.md").read_text() == "# X\n"
    assert sorted(p.name for p in (root / "decisions" / "new" / "deep").iterdir()) == ["x.md"]  # no temporary left
