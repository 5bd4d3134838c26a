"""`append_held` and `transact_held`: the caller waits for its commit whatever
cancel comes, and the cancel reaches it at its next checkpoint, as if the wait
were inside a shielded cancel scope (decision 0038)."""

from __future__ import annotations

import trio

from gormes.events.notes import NoteAdded


def note(text: str) -> NoteAdded:
    return NoteAdded(text=text)


async def test_a_cancelled_held_append_returns_its_result_then_the_cancel_lands(store):
    seen: list[object] = []
    with trio.CancelScope() as scope:
        scope.cancel()  # pending before the wait begins: a plain append would raise at once
        seen.append((await store.append_held("s", [note("kept")])).version)
        seen.append("after the append, before a checkpoint")
        await trio.lowlevel.checkpoint()
        seen.append("not reached")
    assert scope.cancelled_caught
    assert seen == [1, "after the append, before a checkpoint"]
    assert [r.event.text for r in await store.read_stream("s")] == ["kept"]


async def test_a_cancelled_held_transact_returns_its_result_then_the_cancel_lands(store):
    seen: list[object] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        seen.append(await store.transact_held(lambda tx: tx.append("s", [note("kept")]).version))
        await trio.lowlevel.checkpoint()
        seen.append("not reached")
    assert scope.cancelled_caught and seen == [1]


async def test_a_cancelled_plain_append_stops_waiting_and_still_commits(store):
    """The contrast: `append` lets the cancel end the wait (the request commits)."""
    seen: list[object] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        seen.append(await store.append("s", [note("committed unseen")]))
    assert scope.cancelled_caught and seen == []
    await store.append("s", [note("next")], expected_version=1)  # the first one did commit
