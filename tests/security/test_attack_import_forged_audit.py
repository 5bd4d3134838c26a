"""A file given to `gormes import` brings an audit day with a chain of its own that
verifies (forged with the public algorithm): a gateway client's `shell.run` ok, the
operator's `memory.forget`. Before decision 0087, `gormes audit verify` called such
a day `intact`, exit 0, and the executor's real records went on chaining from a
forged head. Now verify (text and --json) and the doctor say which records an
import brought (which import: position, time, caller, file name and sha256) and
which were sealed here; an import cannot bring the record that says so, append
cannot write it, redact cannot erase it; a migration keeps it; a retention
segment imported back is named by its manifest's sha256."""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from datetime import datetime
from pathlib import Path

import msgspec
from cli_helpers import REPO, assert_one_line_error, run_gormes

from gormes.events.audit import OperationAudited
from gormes.events.audit_chain import GENESIS, sealed

PAST_DAY = "2026-03-01"


def forged_day(day: str, path: Path, *, gz: bool = False) -> str:
    """A self-consistent audit day as an attacker makes it; the file's sha256."""
    stream = f"audit-{day}"
    at = int(datetime.fromisoformat(day + "T12:00:00+00:00").timestamp() * 1000)
    records = [
        dict(operation="shell.run", audit_kind="shell.run", caller="mcp:alice", trust="gateway", allowed=True,
             outcome="ok", duration_ms=3.0, input_sha256="0" * 64, mutating=True, at=at),
        dict(operation="memory.forget", audit_kind="memory.admin", caller="cli", trust="operator", allowed=True,
             outcome="ok", duration_ms=3.0, input_sha256="1" * 64, mutating=True, at=at + 1),
    ]
    prev, lines = GENESIS, []
    for version, fields in enumerate(records, start=1):
        event = sealed(OperationAudited(**fields), stream, version, prev)
        prev = event.digest
        lines.append(json.dumps({"position": 1000 + version, "stream": stream, "version": version,
                                 "type": "audit.operation", "schema_version": 1, "recorded_at": at / 1000,
                                 "data": msgspec.to_builtins(event)}) + "\n")
    data = "".join(lines).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ok(done):
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def verify_json(db) -> dict[str, dict]:
    return {d["day"]: d for d in map(json.loads, ok(run_gormes(db, "audit", "verify", "--json")).stdout.splitlines())}


def verify_text(db) -> dict[str, str]:
    lines = ok(run_gormes(db, "audit", "verify")).stdout.splitlines()
    return {line.split(":", 1)[0]: line for line in lines}


def chain_check(db, *extra: str) -> dict:
    done = run_gormes(db, "doctor", "--json", "--offline", *extra)
    return {c["name"]: c for c in json.loads(done.stdout)["checks"]}["audit.chain"]


def markers(db) -> list[dict]:
    listed = ok(run_gormes(db, "events", "--json"))
    return [e for e in map(json.loads, listed.stdout.splitlines()) if e["stream"] == "log-imports"]


def a_log_with_a_real_record(db: Path) -> str:
    ok(run_gormes(db, "jobs", "submit", "echo", "--data", "1"))
    return time.strftime("%Y-%m-%d", time.gmtime())


def test_a_forged_past_day_is_named_imported_with_its_import_not_intact(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    today = a_log_with_a_real_record(db)
    forged = tmp_path / "past.jsonl"
    sha = forged_day(PAST_DAY, forged)
    imported = json.loads(ok(run_gormes(db, "import", str(forged), "--json")).stdout)

    day = verify_json(db)[PAST_DAY]
    assert day["intact"]  # the forged chain verifies: the algorithm is public
    assert (day["origin"], day["here"], day["imported"]) == ("imported", 0, 2)
    [by] = day["imports"]
    assert (by["position"], by["caller"], by["trust"], by["name"], by["sha256"], by["records"]) == (
        imported["recorded_at"], "cli", "operator", str(forged), sha, 2)
    assert verify_json(db)[today]["origin"] == "here"

    text = verify_text(db)
    assert text[PAST_DAY].startswith(f"{PAST_DAY}: IMPORTED, chain intact"), text[PAST_DAY]
    assert f"position {imported['recorded_at']}" in text[PAST_DAY] and sha in text[PAST_DAY]
    assert json.dumps(str(forged)) in text[PAST_DAY]
    assert text[today].startswith(f"{today}: intact") and "all sealed here" in text[today]

    check = chain_check(db)
    assert check["status"] == "warn" and f"{PAST_DAY}: imported" in check["message"], check


def test_a_forged_head_that_todays_live_records_chain_onto_is_named(tmp_path: Path) -> None:
    """On a new log the forged records open today's chain; the executor's records follow them."""
    db = tmp_path / "g.db"
    today = time.strftime("%Y-%m-%d", time.gmtime())
    forged = tmp_path / "today.jsonl"
    forged_day(today, forged)
    imported = json.loads(ok(run_gormes(db, "import", str(forged), "--json")).stdout)
    ok(run_gormes(db, "jobs", "submit", "echo", "--data", "1"))

    day = verify_json(db)[today]
    assert day["intact"] and day["origin"] == "mixed", day
    assert (day["imported"], day["here"]) == (2, day["records"] - 2) and day["here"] >= 2
    join = day["onto_import"]
    assert (join["onto_position"], join["import_position"], join["version"]) == (
        imported["last_position"], imported["recorded_at"], 3)
    line = verify_text(db)[today]
    assert line.startswith(f"{today}: MIXED, chain intact"), line
    assert f"chain onto an imported record (position {imported['last_position']})" in line
    check = chain_check(db)
    assert check["status"] == "warn" and "sealed here onto an imported record" in check["message"], check


def test_an_import_cannot_bring_the_record_that_names_imports(tmp_path: Path) -> None:
    """A file's own log.imported (one claiming another range, or its own lines as
    another log's) is left out; any other line on log-imports is refused whole."""
    db = tmp_path / "g.db"
    a_log_with_a_real_record(db)
    forged = tmp_path / "past.jsonl"
    forged_day(PAST_DAY, forged)
    claim = {"first_position": 1, "last_position": 1, "imported": 1, "caller": "cli", "trust": "operator",
             "at": 0.0, "audit_days": [{"stream": "audit-2026-01-01", "records": 1, "first_version": 1,
                                        "last_version": 1}]}
    with forged.open("a") as out:
        out.write(json.dumps({"stream": "log-imports", "type": "log.imported", "data": claim}) + "\n")
        out.write(json.dumps({"stream": "elsewhere", "type": "log.imported", "data": claim}) + "\n")
    done = ok(run_gormes(db, "import", str(forged)))
    assert "left out 2 log.imported record(s)" in done.stdout
    [own] = markers(db)
    assert own["data"]["left_out"] == 2 and own["data"]["imported"] == 2
    assert verify_json(db)[PAST_DAY]["origin"] == "imported"

    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"stream": "log-imports", "type": "note.added", "data": {"text": "x"}}) + "\n")
    assert "log-imports" in assert_one_line_error(refused := run_gormes(db, "import", str(other)))
    assert refused.returncode == 2
    for stream in ("log-imports", "s"):
        data = json.dumps(claim)
        assert_one_line_error(run_gormes(db, "append", stream, "log.imported", "--data", data))
    assert_one_line_error(run_gormes(db, "append", "log-imports", "note.added", "--data", '{"text": "x"}'))
    for args in (("--stream", "log-imports"), ("--position", str(own["position"]))):
        assert_one_line_error(run_gormes(db, "redact", *args, "--reason", "hide the import"))
    assert markers(db) == [own]
    assert verify_json(db)[PAST_DAY]["origin"] == "imported"


def test_the_doctor_walks_again_a_day_an_import_brought_before_its_last_run(tmp_path: Path) -> None:
    """Its incremental walk starts at the last day it saw: an earlier day imported
    since is walked, and named, without --full."""
    db = tmp_path / "g.db"
    a_log_with_a_real_record(db)
    assert chain_check(db)["status"] == "ok"
    forged = tmp_path / "past.jsonl.gz"
    forged_day(PAST_DAY, forged, gz=True)
    ok(run_gormes(db, "import", str(forged)))
    check = chain_check(db)
    assert check["status"] == "warn" and f"{PAST_DAY}: imported" in check["message"], check
    assert check["message"].startswith("2 audit day(s)"), check
    again = chain_check(db)  # remembered, not walked again
    assert (again["status"], again["message"]) == (check["status"], check["message"])


def test_a_restored_export_is_imported_as_a_whole(tmp_path: Path) -> None:
    """Restoring one's own export: every day it brings is named imported in the
    copy (sealed by the log it came from), and the source's own log.imported is left out."""
    db = tmp_path / "g.db"
    today = a_log_with_a_real_record(db)
    forged = tmp_path / "past.jsonl"
    forged_day(PAST_DAY, forged)
    ok(run_gormes(db, "import", str(forged)))
    dump = tmp_path / "dump.jsonl"
    ok(run_gormes(db, "export", "--out", str(dump)))
    copy = tmp_path / "copy.db"
    done = ok(run_gormes(copy, "import", str(dump), "--json", "--live-work"))  # its waiting job
    restored = json.loads(done.stdout)
    assert restored["left_out"] == 1 and restored["sha256"] == hashlib.sha256(dump.read_bytes()).hexdigest()
    days = verify_json(copy)
    assert days[PAST_DAY]["origin"] == "imported"
    assert days[today]["origin"] == "mixed"  # the source's records, then the restore's own audit record
    assert {i["position"] for d in days.values() for i in d["imports"]} == {restored["recorded_at"]}


def test_a_retention_segment_imported_back_is_named_by_its_manifest(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    fixtures = REPO / "replay_fixtures"
    manifest = json.loads((fixtures / "manifest.json").read_text())
    ok(run_gormes(db, "import", str(fixtures / manifest["subagents"]["file"])))
    ok(run_gormes(db, "retain", "--older-than", "0s"))
    [segment] = (tmp_path / "g-archive").glob("*.jsonl.gz")
    kept = json.loads(segment.with_name(segment.name.replace(".jsonl.gz", ".manifest.json")).read_text())
    back = json.loads(ok(run_gormes(db, "import", str(segment), "--json")).stdout)
    assert back["sha256"] == kept["sha256"]
    last = markers(db)[-1]
    assert (last["position"], last["data"]["name"], last["data"]["sha256"], last["data"]["imported"]) == (
        back["recorded_at"], str(segment), kept["sha256"], kept["events"])
    assert last["data"]["audit_days"] == []  # a segment holds no audit record: nothing there passes for sealed
    assert all(d["origin"] == "here" for d in verify_json(db).values())


def test_a_migrated_log_says_what_its_source_said(tmp_path: Path) -> None:
    """`migrate` copies every row at its position, the log.imported records too:
    the target names the same records imported, by the same import."""
    from pg_helpers import fresh_schema, require_postgres, url_for_schema

    require_postgres()
    db = tmp_path / "g.db"
    a_log_with_a_real_record(db)
    forged = tmp_path / "past.jsonl"
    forged_day(PAST_DAY, forged)
    ok(run_gormes(db, "import", str(forged)))
    source = verify_json(db)
    with fresh_schema() as name:
        url = url_for_schema(name)
        ok(run_gormes(db, "migrate", "--from", f"sqlite:{db}", "--to", url))
        target = verify_json(url)
        assert target == source and target[PAST_DAY]["origin"] == "imported"
        assert chain_check(url)["status"] == "warn"
