"""Audit export: time parsing, filters, the record schema, the generated taxonomy."""

from __future__ import annotations

import io
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from gormes.audit_export import (
    AuditExport,
    AuditRecord,
    InvalidTime,
    make_filter,
    parse_time,
    read_audit,
    write_lines,
)
from gormes.audit_taxonomy import render, taxonomy
from gormes.events.codec import default_codec
from gormes.events.sqlite import SQLiteEventStore
from gormes.tools.builtin import default_registry
from gormes.ops.executor import Executor
from gormes.ops.spec import Caller, OperationDenied

DAY1 = datetime(2025, 1, 1, 12, tzinfo=UTC).timestamp()
DAY3 = datetime(2025, 1, 3, 12, tzinfo=UTC).timestamp()
NOW = DAY3 + 3600
DOC = Path(__file__).parents[2] / "docs" / "audit.md"


def test_relative_and_iso_times():
    assert parse_time("2h", NOW) == NOW - 7200
    assert parse_time("7d", NOW) == NOW - 7 * 86400
    assert parse_time("90s", NOW) == NOW - 90
    assert parse_time("2025-01-01T12:00:00Z", NOW) == DAY1
    assert parse_time("2025-01-01T12:00:00", NOW) == DAY1  # no offset: UTC
    assert parse_time("2025-01-01T13:00:00+01:00", NOW) == DAY1
    assert parse_time("2025-01-03", NOW) == DAY3 - 12 * 3600


@pytest.mark.parametrize("bad", ["yesterday", "2h ago", "-3d", "", "2025-13-01", "5y"])
def test_bad_times_are_user_errors(bad):
    with pytest.raises(InvalidTime) as info:
        parse_time(bad, NOW)
    assert info.value.exit_code == 2


def test_since_must_be_before_until():
    with pytest.raises(InvalidTime):
        make_filter("1h", "2h", (), NOW)


async def _audited_calls(path: Path) -> None:
    clock = {"now": DAY1}
    async with SQLiteEventStore.open(path) as store:
        executor = Executor(default_registry(), store, clock=lambda: clock["now"])
        await executor.call("time.now", "{}", Caller(trust="operator", id="cli"))
        with pytest.raises(OperationDenied):
            await executor.call("shell.run", '{"command": "ls"}', Caller(trust="gateway", id="gw-1"))
        clock["now"] = DAY3
        await executor.call("time.now", None, Caller(trust="system", id="cron"))
        with pytest.raises(OperationDenied):
            await executor.call("no.such.op", "{}", Caller(trust="operator", id="cli"))


def _export(path: Path, since: str | None = None, until: str | None = None, kinds=()) -> list[AuditRecord]:
    out = io.BytesIO()
    conn = sqlite3.connect(path)
    try:
        result = AuditExport()
        write_lines(read_audit(conn, make_filter(since, until, tuple(kinds), NOW), default_codec, result), out, result)
    finally:
        conn.close()
    lines = out.getvalue().splitlines()
    assert result.written == len(lines)
    decoder = msgspec.json.Decoder(AuditRecord)
    records = []
    for line in lines:
        assert set(msgspec.json.decode(line)) == set(AuditRecord.__struct_fields__)
        records.append(decoder.decode(line))
    return records


async def test_every_call_and_trust_decision_is_exported(db_path: Path):
    await _audited_calls(db_path)
    records = _export(db_path)
    assert [(r.operation, r.trust, r.allowed, r.outcome) for r in records] == [
        ("time.now", "operator", True, "ok"),
        ("shell.run", "gateway", False, "denied"),
        ("time.now", "system", True, "ok"),
        ("no.such.op", "operator", False, "denied"),
    ]
    assert all(r.schema_version == 2 for r in records)
    assert records[0].time == "2025-01-01T12:00:00.000Z" and records[0].stream == "audit-2025-01-01"
    assert records[3].audit_kind is None
    assert [r.position for r in records] == sorted(r.position for r in records)


async def test_time_range_and_kind_filters(db_path: Path):
    await _audited_calls(db_path)
    assert [r.stream for r in _export(db_path, since="2025-01-02")] == ["audit-2025-01-03"] * 2
    assert [r.operation for r in _export(db_path, until="2025-01-02")] == ["time.now", "shell.run"]
    assert _export(db_path, since="2025-01-01T12:00:00Z", until="2025-01-01T12:00:00.001Z")[0].trust == "operator"
    assert [r.trust for r in _export(db_path, kinds=["time.read"])] == ["operator", "system"]
    assert [r.operation for r in _export(db_path, kinds=["shell.exec", "time.read"], since="2h")] == ["time.now"]
    assert len(_export(db_path, since="1h")) == 2  # NOW is an hour after the last calls: inclusive
    assert _export(db_path, since="59m") == []


async def test_an_audit_row_this_gormes_cannot_read_is_counted_not_exported(db_path: Path):
    await _audited_calls(db_path)
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("INSERT INTO events(stream, version, type, type_version, data, recorded_at) "
                 "VALUES ('audit-2025-01-03', 99, 'audit.operation', 7, '{\"at\": 1}', 0)")
    result = AuditExport()
    records = list(read_audit(conn, make_filter(None, None, (), NOW), default_codec, result))
    conn.close()
    assert len(records) == 4 and result.unreadable == 1


def test_the_committed_taxonomy_is_the_generated_one():
    page = DOC.read_text()
    assert render(page, default_registry().list()) == page, (
        "docs/audit.md is stale: run `python -m gormes.audit_taxonomy docs/audit.md`"
    )


def test_the_taxonomy_names_every_operation_and_audit_kind():
    text = taxonomy(default_registry().list())
    for spec in default_registry().list():
        assert f"| `{spec.audit_kind}` | `{spec.name}` |" in text


def test_every_record_field_is_documented():
    page = DOC.read_text()
    for field in AuditRecord.__struct_fields__:
        assert f"| `{field}` |" in page, field
