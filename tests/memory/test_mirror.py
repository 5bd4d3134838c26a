"""Markdown mirrors: deterministic, idempotent, showing provenance, leaving out what is gone."""

from __future__ import annotations

from pathlib import Path

from gormes.events.memory import Origin
from gormes.memory.mirror import mirror
from gormes.memory.writer import MemoryTarget, MemoryWriter, Source
from gormes.projections.memory import memory_projection, read_connection
from gormes.projections.runner import ProjectionRunner

MANUAL = Source(origin=Origin(artifact="notes/people.md"), kind="imported")
GATEWAY = Source(origin=Origin(run_id="run-3", turn_id="seq:4"), kind="extracted", trust="gateway",
                 extractor_version="memory-extractor/1", confidence=0.5, evidence="Bob said so")


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


async def build(store) -> MemoryWriter:
    writer = MemoryWriter(store, clock=iter(range(1_700_000_000, 1_800_000_000, 60)).__next__)
    await writer.relate("project:x", "Ada Lovelace", "works at", "Acme", MANUAL)
    await writer.relate("chat:b", "Bob", "dislikes", "Acme", GATEWAY)
    await writer.add_fact("project:x", "Ada prefers tea", MANUAL, subject="Ada Lovelace")
    return writer


async def write(store, out: Path):
    await ProjectionRunner(store, memory_projection).catch_up()
    return await store.read_with(lambda log: mirror(read_connection(log), out))


async def test_twice_gives_byte_identical_files_and_writes_nothing(store, tmp_path: Path):
    await build(store)
    first = await write(store, tmp_path / "m")
    before = snapshot(tmp_path / "m")
    second = await write(store, tmp_path / "m")
    assert first.written == first.pages == len(before) == 5  # USER.md + 4 entities
    assert second.written == 0 and snapshot(tmp_path / "m") == before


async def test_pages_show_relationships_with_provenance(store, tmp_path: Path):
    await build(store)
    await write(store, tmp_path / "m")
    ada = (tmp_path / "m/entities/project_x/ada-lovelace.md").read_text()
    assert "Ada Lovelace —works_at→ Acme" in ada
    assert "provenance: imported" in ada and "origin: artifact notes/people.md" in ada and "Ada prefers tea" in ada
    bob = (tmp_path / "m/entities/chat_b/bob.md").read_text()
    assert "_(unreviewed)_" in bob and "origin: run run-3 turn seq:4" in bob and "extractor: memory-extractor/1" in bob
    assert "confidence: 0.50" in bob
    user = (tmp_path / "m/USER.md").read_text()
    assert "## chat:b" in user and "## project:x" in user


async def test_forgotten_entities_lose_their_page(store, tmp_path: Path):
    writer = await build(store)
    await write(store, tmp_path / "m")
    await writer.forget(MemoryTarget(id="bob", kind="entity", scope="chat:b"))
    result = await write(store, tmp_path / "m")
    assert result.removed == 1 and not (tmp_path / "m/entities/chat_b/bob.md").exists()
    assert "dislikes" not in (tmp_path / "m/entities/chat_b/acme.md").read_text()
