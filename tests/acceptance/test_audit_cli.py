"""`gormes audit export` through the real CLI: every line validates, filters, bad input."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from cli_helpers import assert_one_line_error, run_gormes, write_notes

from gormes.audit_export import AuditRecord


@pytest.fixture
def audited(tmp_path: Path) -> Path:
    db = tmp_path / "gormes.db"
    assert run_gormes(db, "ops", "call", "time.now", "{}").returncode == 0
    assert run_gormes(db, "ops", "call", "shell.run", '{"command": "true"}').returncode != 0
    assert run_gormes(db, "ops", "call", "fs.read", '{"path": "no/such/file"}').returncode != 0
    return db


def _records(text: str) -> list[AuditRecord]:
    decoder = msgspec.json.Decoder(AuditRecord)
    records = []
    for line in text.splitlines():
        assert set(msgspec.json.decode(line)) == set(AuditRecord.__struct_fields__)
        records.append(decoder.decode(line))
    return records


def test_export_writes_one_valid_line_per_call(audited):
    done = run_gormes(audited, "audit", "export")
    assert done.returncode == 0, done.stderr
    records = _records(done.stdout)
    assert [r.operation for r in records] == ["time.now", "shell.run", "fs.read"]
    assert all(r.schema_version == 2 and r.trust == "operator" for r in records)
    assert records[0].outcome == "ok"
    assert records[1].outcome == "denied"  # shell.run is off unless enabled
    assert records[2].outcome == "invalid" and records[2].error


def test_kind_and_time_filters(audited):
    kinds = _records(run_gormes(audited, "audit", "export", "--kind", "time.read").stdout)
    assert [r.operation for r in kinds] == ["time.now"]
    several = _records(run_gormes(audited, "audit", "export", "--kind", "time.read", "--kind", "fs.read").stdout)
    assert [r.operation for r in several] == ["time.now", "fs.read"]
    recent = _records(run_gormes(audited, "audit", "export", "--since", "1d").stdout)
    assert len(recent) == 3
    assert run_gormes(audited, "audit", "export", "--until", "2000-01-01").stdout == ""
    assert run_gormes(audited, "audit", "export", "--since", "2999-01-01T00:00:00Z").stdout == ""


def test_out_writes_a_file(audited, tmp_path):
    out = tmp_path / "audit.jsonl"
    done = run_gormes(audited, "audit", "export", "--out", str(out))
    assert done.returncode == 0 and done.stdout == ""
    assert len(_records(out.read_text())) == 3
    assert "wrote 3 audit record(s)" in done.stderr


@pytest.mark.parametrize("args", [
    ("--since", "yesterday"),
    ("--until", "2025-13-45"),
    ("--since", "1h", "--until", "2h"),
])
def test_bad_times_are_one_line_and_exit_2(audited, args):
    done = run_gormes(audited, "audit", "export", *args)
    assert done.returncode == 2
    line = assert_one_line_error(done)
    assert "invalid time" in line or "is not before --until" in line


def test_a_bad_time_does_not_create_the_out_file(audited, tmp_path):
    out = tmp_path / "never.jsonl"
    done = run_gormes(audited, "audit", "export", "--since", "soon", "--out", str(out))
    assert done.returncode == 2 and not out.exists()


def test_verify_finds_one_intact_chain_written_by_three_processes(audited):
    done = run_gormes(audited, "audit", "verify", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    (day,) = [msgspec.json.decode(line) for line in done.stdout.splitlines()]
    assert (day["records"], day["sealed"], day["unsealed"], day["intact"]) == (3, 3, 0, True)
    assert len(day["head"]) == 64 and day["first_break"] is None
    text = run_gormes(audited, "audit", "verify")
    assert text.returncode == 0 and text.stdout.startswith(f"{day['day']}: intact, 3 sealed record(s)")


def test_verify_on_a_database_with_no_audit_says_so(tmp_path):
    db = tmp_path / "empty.db"
    write_notes(db, [("notes", "hi")])  # not `gormes append`, which is itself audited now
    done = run_gormes(db, "audit", "verify")
    assert (done.returncode, done.stdout) == (0, "no audit records\n")
