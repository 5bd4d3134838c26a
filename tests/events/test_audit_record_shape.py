"""An audit record is stored without the fields at their default (decision 0067):
no `"started_position":null` on every record. A day's chain holding records
stored before, with every field and its nulls, and records stored now verifies
intact; the export (schema 2) still writes every field, nulls included."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import msgspec

from gormes.audit_export import AuditFilter, AuditRecord, read_audit
from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.audit_chain import append_sealed, verify_chains
from gormes.events.codec import default_codec
from gormes.events.sqlite import SQLiteEventStore
from gormes.events.store import AppendRequest

AT = 1_796_000_000_000


def call(outcome: str, started_position: int | None = None) -> OperationAudited:
    return OperationAudited(
        operation="knowledge.write", audit_kind="knowledge.write", caller="cli", trust="operator",
        allowed=True, outcome=outcome, duration_ms=1.0, input_sha256="0" * 64, mutating=True, at=AT,
        started_position=started_position,
    )


async def seal(db: Path, event: OperationAudited) -> int:
    async with SQLiteEventStore.open(db) as store:
        [result] = await append_sealed(store, AppendRequest(audit_stream(AT), [event]))
    return result.first_position


def stored(db: Path, position: int) -> dict:
    with sqlite3.connect(db) as conn:
        return json.loads(conn.execute("SELECT data FROM events WHERE position = ?", (position,)).fetchone()[0])


def store_as_before(db: Path, position: int) -> None:
    """Rewrite the row as gormes stored it before 0067: every field, null or not."""
    event = default_codec.decode("audit.operation", 1, json.dumps(stored(db, position)))
    data = json.dumps({"type": "audit.operation", **msgspec.structs.asdict(event)}, separators=(",", ":"))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE events SET data = ? WHERE position = ?", (data, position))


async def test_no_field_at_its_default_is_stored(db_path: Path):
    started = await seal(db_path, call("started"))
    outcome = await seal(db_path, call("ok", started_position=started))
    assert "started_position" not in stored(db_path, started)
    assert {"run_id", "job_id", "error"}.isdisjoint(stored(db_path, started))
    assert stored(db_path, outcome)["started_position"] == started


async def test_a_chain_of_records_stored_before_and_now_verifies_intact(db_path: Path):
    before = await seal(db_path, call("started"))
    store_as_before(db_path, before)
    assert stored(db_path, before)["started_position"] is None
    now = await seal(db_path, call("ok", started_position=before))  # chained onto the rewritten record
    assert stored(db_path, now)["prev"] == stored(db_path, before)["digest"]
    with sqlite3.connect(db_path) as conn:
        [day] = verify_chains(conn, default_codec)
        records = list(read_audit(conn, AuditFilter(), default_codec))
    assert (day.intact, day.sealed) == (True, 2)
    # The export writes every field, as schema 2 says, and reads back the same.
    lines = [msgspec.json.encode(r) for r in records]
    assert all(set(json.loads(line)) == set(AuditRecord.__struct_fields__) for line in lines)
    assert [msgspec.json.decode(line, type=AuditRecord) for line in lines] == records
    assert [r.started_position for r in records] == [None, before]
