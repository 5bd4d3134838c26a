"""`gormes import` streams its input: a file of any size, plain or gzip (an
archived segment), goes in one transaction with memory bounded by a chunk of
lines, and a bad line anywhere undoes all of it. On both backends."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from pg_helpers import backend, store_on_both_backends  # noqa: F401 - fixtures

from gormes.errors import UserError
from gormes.events import jsonl
from gormes.events.notes import NoteAdded


def lines(n: int, bad_at: int | None = None) -> str:
    out = []
    for i in range(1, n + 1):
        if i == bad_at:
            out.append("{not json")
        else:
            out.append(json.dumps({"stream": f"s-{i % 7}", "type": "note.added", "data": {"text": f"n{i}"}}))
    return "\n".join(out) + "\n"


class CountingTx:
    """A transaction that remembers the most rows staged between two flushes."""

    def __init__(self, tx: Any) -> None:
        self.tx, self.staged, self.most = tx, 0, 0

    def append_many(self, requests: Any) -> Any:
        self.staged += sum(len(r.events) for r in requests)
        self.most = max(self.most, self.staged)
        return self.tx.append_many(requests)

    def flush(self) -> None:
        self.tx.flush()
        self.staged = 0


async def notes(store: Any) -> list[str]:
    return [r.event.text for r in await store.read_all() if isinstance(r.event, NoteAdded)]


@pytest.mark.parametrize("compressed", [False, True])
async def test_a_file_streams_in_chunks_in_one_transaction(store: Any, tmp_path: Path, compressed: bool) -> None:
    path = tmp_path / ("in.jsonl.gz" if compressed else "in.jsonl")
    text = lines(2_500)
    path.write_bytes(gzip.compress(text.encode()) if compressed else text.encode())
    counting: list[CountingTx] = []

    def streamed(tx: Any) -> Any:
        counting.append(CountingTx(tx))
        return jsonl.import_file_in(counting[0], path, chunk=400)

    result = await store.transact(streamed)
    assert (result.imported, result.first_position, result.last_position) == (2_500, 1, 2_500)
    assert counting[0].most == 400  # never more than a chunk held before it is sent
    assert await notes(store) == [f"n{i}" for i in range(1, 2_501)]


@pytest.mark.parametrize("trouble", ["bad line", "truncated gzip"])
async def test_trouble_late_in_the_file_undoes_every_line_before_it(store: Any, tmp_path: Path, trouble: str) -> None:
    await store.append("kept", [NoteAdded(text="before")])
    path = tmp_path / "in.jsonl.gz"
    if trouble == "bad line":
        path.write_bytes(gzip.compress(lines(1_200, bad_at=1_150).encode()))
        expected = "line 1150: malformed JSON"
    else:
        path.write_bytes(gzip.compress(lines(1_200).encode())[:-40])
        expected = "cannot read"
    with pytest.raises(UserError, match=expected):
        await store.transact(lambda tx: jsonl.import_file_in(tx, path, chunk=100))
    assert await notes(store) == ["before"]  # flushed chunks were undone with the transaction
