"""Redaction in the store (decision 0026), on SQLite and PostgreSQL: a row's data
becomes a tombstone in place, positions and versions hold, the codec decodes it,
export carries the tombstone only and import takes it back."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pg_helpers import backend, store_on_both_backends  # noqa: F401 (fixtures)

from gormes.events.audit import OperationAudited
from gormes.events.base import REDACTED_SCHEMA_VERSION, Recorded, RedactedEvent
from gormes.events.codec import default_codec
from gormes.events.jsonl import STORED_JSON, parse_line, to_line
from gormes.events.notes import NoteAdded
from gormes.events.redaction import (
    REDACTIONS_STREAM,
    LogRedacted,
    RedactionRefused,
    positions_containing,
    redact_in,
)

SECRET = 'the door code is "4711" ünd more'


async def _rows(store: Any) -> list[tuple[Any, ...]]:
    return await store.read_sql(lambda c: c.execute(
        "SELECT position, stream, version, type, type_version, data FROM events ORDER BY position").fetchall())


async def test_a_redacted_event_keeps_its_place_and_loses_its_text(store: Any) -> None:
    await store.append("notes-a", [NoteAdded(text="keep me"), NoteAdded(text=SECRET)])
    await store.append("notes-b", [NoteAdded(text="other " + SECRET)])
    before = await _rows(store)
    found = await store.read_sql(lambda c: positions_containing(c, [SECRET]))
    assert found == [2, 3]

    record = await store.transact(lambda tx: redact_in(tx, found, by="operator:test", reason="asked to"))
    assert isinstance(record, LogRedacted)
    assert [e.position for e in record.entries] == [2, 3]
    assert record.entries[0].sha256 == hashlib.sha256(before[1][5].encode()).hexdigest()

    after = await _rows(store)
    assert [r[:4] for r in after[:3]] == [r[:4] for r in before]  # position, stream, version, type
    assert after[0] == before[0]
    for row in after[1:3]:
        assert row[4] == REDACTED_SCHEMA_VERSION
        assert "4711" not in row[5] and "door" not in row[5]
    assert after[3][1] == REDACTIONS_STREAM and after[3][3] == "log.redacted"
    assert await store.read_sql(lambda c: positions_containing(c, [SECRET])) == []

    events = await store.read_stream("notes-a")
    assert isinstance(events[0].event, NoteAdded)
    redacted = events[1].event
    assert isinstance(redacted, RedactedEvent) and redacted.type == "note.added"
    assert (redacted.redacted.by, redacted.redacted.reason) == ("operator:test", "asked to")
    assert await store.stream_version("notes-a") == 2


async def test_redacting_again_changes_nothing(store: Any) -> None:
    await store.append("notes-a", [NoteAdded(text=SECRET)])
    assert await store.transact(lambda tx: redact_in(tx, [1], by="op", reason="r")) is not None
    once = await _rows(store)
    assert await store.transact(lambda tx: redact_in(tx, [1, 99], by="op", reason="again")) is None
    assert await _rows(store) == once


async def test_audit_and_redaction_records_are_refused_and_nothing_is_written(store: Any) -> None:
    await store.append("notes-a", [NoteAdded(text=SECRET)])
    await store.append("audit-2026-01-01", [OperationAudited(
        operation="x", audit_kind=None, caller="c", trust="operator", allowed=True, outcome="ok",
        duration_ms=1.0, at=0)])
    before = await _rows(store)
    with pytest.raises(RedactionRefused, match="audit"):
        await store.transact(lambda tx: redact_in(tx, [1, 2], by="op", reason="r"))
    assert await _rows(store) == before
    await store.transact(lambda tx: redact_in(tx, [1], by="op", reason="r"))
    with pytest.raises(RedactionRefused):
        await store.transact(lambda tx: redact_in(tx, [3], by="op", reason="r"))


async def test_a_tombstone_exports_without_the_text_and_imports_back(store: Any) -> None:
    await store.append("notes-a", [NoteAdded(text=SECRET), NoteAdded(text="plain")])
    await store.transact(lambda tx: redact_in(tx, [1], by="op", reason="r"))
    lines = await store.read_with(lambda log: [
        to_line(r) for r in STORED_JSON.decode_rows(log.select_rows(), Recorded)])
    text = b"".join(lines)
    assert b"4711" not in text and b"door" not in text
    parsed = parse_line(1, lines[0])
    assert isinstance(parsed.event, RedactedEvent)
    await store.append("notes-copy", [parsed.event])
    copy = await store.read_stream("notes-copy")
    assert copy[0].event == parsed.event
    assert default_codec.encode(parsed.event)[1] == REDACTED_SCHEMA_VERSION
