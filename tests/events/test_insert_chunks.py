"""SQLite's rows go in with one INSERT per chunk of a few sizes, not a step per row
(decision 0052): what lands is the same, in the same positions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from gormes.events import sqlite_log
from gormes.events.notes import NoteAdded
from gormes.events.sqlite import SQLiteEventStore
from gormes.events.sqlite_log import SQLiteLog
from gormes.events.store import AppendRequest


def test_rows_go_in_chunks_of_a_few_sizes() -> None:
    for n in (0, 1, 2, 3, 255, 256, 257, 1023, 1024, 3079):
        sizes = sqlite_log._chunks(n)
        assert sum(sizes) == n
        assert set(sizes) <= set(sqlite_log._INSERTS)
        assert sizes == sorted(sizes, reverse=True)
    assert len(sqlite_log._INSERTS) == 9  # what the connection's statement cache holds of them


async def test_a_burst_of_many_sized_appends_lands_in_order(tmp_path: Path) -> None:
    """Batches of single and multi-event appends and transacts: every row at its
    position, each stream's versions in order, whatever the chunks were."""
    async with SQLiteEventStore.open(tmp_path / "e.db") as store:
        results: dict[int, Any] = {}

        async def one(i: int) -> None:
            events = [NoteAdded(text=f"{i}.{k}") for k in range(1 + i % 3)]
            if i % 7 == 0:
                results[i] = await store.transact(lambda tx: tx.append(f"s-{i % 50}", events))
            else:
                results[i] = (await store.append_many([AppendRequest(f"s-{i % 50}", events)]))[0]

        async with trio.open_nursery() as nursery:
            for i in range(2500):
                nursery.start_soon(one, i)
        records = await store.read_all(0, limit=100_000)
    assert [r.position for r in records] == list(range(1, len(records) + 1))
    assert len(records) == sum(1 + i % 3 for i in range(2500))
    by_position = {r.position: r for r in records}
    for i, result in results.items():
        got = [by_position[p].event.text for p in range(result.first_position, result.last_position + 1)]
        assert got == [f"{i}.{k}" for k in range(1 + i % 3)]
    versions: dict[str, list[int]] = {}
    for r in records:
        versions.setdefault(r.stream, []).append(r.version)
    assert all(v == list(range(1, len(v) + 1)) for v in versions.values())


def test_each_transaction_numbers_from_the_head_it_read_at_begin(tmp_path: Path) -> None:
    """`begin` reads the head with `data_version` in one statement: two connections
    taking turns each number from what the other committed."""
    one, other = SQLiteLog(tmp_path / "e.db"), None
    try:
        other = one.reader()
        first = one.append_now("a", [NoteAdded(text="1")])
        second = other.append_now("b", [NoteAdded(text="2"), NoteAdded(text="3")])
        third = one.append_now("a", [NoteAdded(text="4")], expected_version=1)
        assert (first.first_position, second.first_position, second.last_position, third.first_position) == (1, 2, 3, 4)
        assert one.head() == other.head() == 4
    finally:
        one.close()
        if other is not None:
            other.close()
