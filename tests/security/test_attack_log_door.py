"""`gormes append` and `gormes import` go through the audited door: each write and
each refused append is exactly one audit record (trust operator, caller cli)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, run_gormes, write_notes


def events(db: Path) -> list[dict]:
    listed = run_gormes(db, "events", "--json")
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


def split(db: Path) -> tuple[list[dict], list[dict]]:
    """The log's events and its audit records, without the imports' own records
    (`log-imports`, decision 0087: `imported_by` reads those)."""
    everything = events(db)
    audit = [e for e in everything if e["stream"].startswith("audit-")]
    return [e for e in everything if e not in audit and e["stream"] != "log-imports"], audit


def imported_by(db: Path | str) -> list[tuple[int, int, str, str]]:
    """Each import's record: the positions it took, its caller and trust."""
    return [(e["data"]["first_position"], e["data"]["last_position"], e["data"]["caller"], e["data"]["trust"])
            for e in events(db) if e["stream"] == "log-imports"]


def checks_pass(db: Path) -> None:
    for args in (("audit", "verify"), ("projections", "rebuild", "--check")):
        done = run_gormes(db, *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "g.db"
    write_notes(path, [("notes-1", "first")])
    return path


def test_append_and_import_each_leave_one_audit_record(db: Path, tmp_path: Path) -> None:
    assert run_gormes(db, "append", "s", "note.added", "--data", '{"text": "x"}').returncode == 0
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"stream": "t", "type": "note.added", "data": {"text": "y"}}) + "\n")
    assert run_gormes(db, "import", str(source)).returncode == 0
    _, audit = split(db)
    assert [(a["data"]["operation"], a["data"]["trust"], a["data"]["caller"], a["data"]["outcome"])
            for a in audit] == [("events.append", "operator", "cli", "ok"),
                                ("events.import", "operator", "cli", "ok")]
    [note] = [e for e in split(db)[0] if e["stream"] == "t"]
    assert imported_by(db) == [(note["position"], note["position"], "cli", "operator")]
    checks_pass(db)


@pytest.mark.parametrize(("stream", "type_", "data", "outcome"), [
    ("audit-2026-01-01", "note.added", '{"text": "x"}', "denied"),
    ("s", "note.added", '{"text": "x", "bogus": 1}', "invalid"),
    ("s", "note.added", '{"text": "x", "y": ' + "[" * 100_000 + "]" * 100_000 + "}", "invalid"),
])
def test_a_refused_append_is_one_audit_record_and_nothing_else(
        db: Path, stream: str, type_: str, data: str, outcome: str) -> None:
    before, _ = split(db)
    assert_one_line_error(run_gormes(db, "append", stream, type_, "--data", "-", input=data))
    after, audit = split(db)
    assert after == before
    assert [(a["data"]["operation"], a["data"]["outcome"]) for a in audit] == [("events.append", outcome)]
    checks_pass(db)


async def test_a_gateway_over_mcp_is_not_offered_the_log_writes_and_cannot_call_them(db: Path) -> None:
    from mcp_helpers import call_refused, gormes_mcp, tool_names

    async with gormes_mcp(db) as client:
        assert not await tool_names(client) & {"events__append", "events__import"}
        await call_refused(client, "events__append", stream="s", type="note.added", data='{"text": "x"}')
        await call_refused(client, "events__import", records=[])
    logged, audit = split(db)
    assert [e["data"]["text"] for e in logged] == ["first"]
    assert [(a["data"]["operation"], a["data"]["trust"], a["data"]["outcome"]) for a in audit] == [
        ("events__append", "gateway", "denied"), ("events__import", "gateway", "denied")]
    checks_pass(db)


def test_the_same_door_on_postgres(tmp_path: Path) -> None:
    from pg_helpers import fresh_schema, url_for_schema

    with fresh_schema() as name:
        url = url_for_schema(name)
        assert run_gormes(url, "append", "s", "note.added", "--data", '{"text": "x"}').returncode == 0
        assert_one_line_error(run_gormes(url, "append", "audit-x", "note.added", "--data", '{"text": "y"}'))
        source = tmp_path / "in.jsonl"
        source.write_text(json.dumps({"stream": "t", "type": "note.added", "data": {"text": "z"}}) + "\n")
        assert run_gormes(url, "import", str(source)).returncode == 0
        logged, audit = split(url)
        assert [e["data"]["text"] for e in logged] == ["x", "z"]
        assert imported_by(url) == [(logged[1]["position"], logged[1]["position"], "cli", "operator")]
        assert [(a["data"]["operation"], a["data"]["trust"], a["data"]["outcome"]) for a in audit] == [
            ("events.append", "operator", "ok"), ("events.append", "operator", "denied"),
            ("events.import", "operator", "ok")]
        checks_pass(url)


def test_a_version_conflict_is_one_audit_record_and_nothing_else(db: Path) -> None:
    before, _ = split(db)
    refused = run_gormes(db, "append", "notes-1", "note.added", "--data", '{"text": "x"}',
                         "--expected-version", "7")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    after, audit = split(db)
    assert after == before
    assert [(a["data"]["operation"], a["data"]["allowed"], a["data"]["outcome"] != "ok")
            for a in audit] == [("events.append", True, True)]
    checks_pass(db)


def test_ops_call_cannot_smuggle_unparsed_records_into_an_import(db: Path) -> None:
    # Through `gormes ops call` the records arrive as JSON dicts, never checked by
    # the CLI's parser: the operation refuses them instead of writing them.
    before, _ = split(db)
    raw = json.dumps({"records": [{"number": 1, "stream": "audit-2026-01-01",
                                   "event": {"type": "note.added", "text": "forged"}}]})
    assert_one_line_error(run_gormes(db, "ops", "call", "events.import", raw))
    after, audit = split(db)
    assert after == before
    assert [(a["data"]["operation"], a["data"]["outcome"]) for a in audit] == [("events.import", "invalid")]
    checks_pass(db)


def test_an_imported_forged_audit_record_is_caught_by_audit_verify(db: Path, tmp_path: Path) -> None:
    assert run_gormes(db, "append", "s", "note.added", "--data", '{"text": "x"}').returncode == 0
    exported = run_gormes(db, "export")
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    forged = [line for line in lines if line["stream"].startswith("audit-")]
    assert forged
    honest = tmp_path / "honest.jsonl"
    honest.write_text("".join(json.dumps(line) + "\n" for line in forged))
    restored = tmp_path / "honest.db"
    assert run_gormes(restored, "import", "--ignore-versions", str(honest)).returncode == 0
    assert run_gormes(restored, "audit", "verify").returncode == 0  # the untouched chain holds
    for line in forged:
        line["data"]["trust"] = "gateway" if line["data"]["trust"] == "operator" else "operator"
    source = tmp_path / "forged.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in forged))
    target = tmp_path / "restored.db"
    assert run_gormes(target, "import", "--ignore-versions", str(source)).returncode == 0
    assert run_gormes(target, "audit", "verify").returncode == 1
