"""projections.rebuild says how far it is through the executor's progress channel
(OperationContext.progress), which `gormes projections rebuild` shows as a bar."""

from __future__ import annotations

from gormes.events.notes import NoteAdded
from gormes.events.store import NO_STREAM
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller
from gormes.tools.builtin import default_registry

OPERATOR = Caller(trust="operator", id="cli")


async def test_the_rebuild_reports_each_projection_up_to_the_head(store):
    for i in range(30):
        await store.append(f"note-{i}", [NoteAdded(author="a", text=f"n{i}")], NO_STREAM)
    seen: list[tuple[str, int, int]] = []
    executor = Executor(default_registry(), store, progress=lambda *report: seen.append(report))

    out = await executor.call("projections.rebuild", {"names": ["streams"]}, OPERATOR)

    assert [r.name for r in out.rebuilt] == ["streams"]
    assert seen, "the rebuild reported no progress"
    assert {name for name, _, _ in seen} == {"streams"}
    name, done, total = seen[-1]
    assert done == total == out.rebuilt[0].position
    assert [done for _, done, _ in seen] == sorted(done for _, done, _ in seen)


async def test_without_a_progress_channel_the_rebuild_runs_the_same(store):
    await store.append("note-0", [NoteAdded(author="a", text="n0")], NO_STREAM)
    out = await Executor(default_registry(), store).call("projections.rebuild", {"names": ["streams"]}, OPERATOR)
    assert out.rebuilt[0].position >= 1
