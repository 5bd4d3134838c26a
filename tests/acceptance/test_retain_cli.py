"""`gormes retain` in subprocesses (issue 18, decision 0029): the operator archives the
streams that ended before a horizon; `projections rebuild --check` finds the
projections identical after it; an archived run replays exactly from its segment
(`gormes replay RUN --file SEGMENT`) and the segment imports back; --dry-run
changes nothing but its audit record; bad input is one line, exit 2; a retention
killed with SIGKILL mid-way leaves the log whole (all of it retained or none);
the doctor reports the size, the horizon and the space reclaimable; PostgreSQL too."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import REPO, assert_one_line_error, cli_env, gormes_command, json_lines, rows, run_gormes

FIXTURES = REPO / "replay_fixtures"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
HANDLERS = str(FIXTURES / "handlers.py")


def fixture(name: str) -> str:
    return str(FIXTURES / MANIFEST[name]["file"])


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def with_runs(db: Path) -> None:
    for name in ("subagents", "tool_error"):
        ok(run_gormes(db, "import", fixture(name)))
    ok(run_gormes(db, "append", "notes-a", "note.added", "--data", '{"text": "kept"}'))


def test_retain_then_rebuild_check_is_identical_and_the_run_replays_from_its_segment(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    with_runs(db)
    assert rows(db, "PRAGMA auto_vacuum") == [(2,)]  # a new file is made with auto_vacuum=INCREMENTAL
    before = rows(db, "SELECT position, stream, version, data FROM events ORDER BY position")
    audits = len(rows(db, "SELECT 1 FROM events WHERE type = 'audit.operation'"))
    dry = json.loads(ok(run_gormes(db, "retain", "--older-than", "0s", "--dry-run", "--json")).stdout)
    assert dry["dry_run"] and dry["segment"] is None and dry["kinds"] == {"run": 4}
    after = rows(db, "SELECT position, stream, version, data FROM events ORDER BY position")
    assert after[: len(before)] == before and len(after) == len(before) + 1  # its audit record only
    assert len(rows(db, "SELECT 1 FROM events WHERE type = 'audit.operation'")) == audits + 1
    assert not (tmp_path / "g-archive").exists()

    done = ok(run_gormes(db, "retain", "--older-than", "0s"))
    assert done.stdout.startswith(f"archived 4 stream(s): 4 run; {dry['events']} event(s)")
    [segment] = (tmp_path / "g-archive").glob("*.jsonl.gz")
    assert (tmp_path / "g-archive" / segment.name.replace(".jsonl.gz", ".manifest.json")).exists()
    assert rows(db, "SELECT count(*) FROM events WHERE stream GLOB 'run-*'") == [(0,)]
    kept = rows(db, "SELECT position, stream, version, data FROM events WHERE stream = 'notes-a'")
    assert kept == [r for r in before if r[1] == "notes-a"]

    check = run_gormes(db, "projections", "rebuild", "--check", timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    for expected in MANIFEST["subagents"]["replays"]:
        replayed = ok(run_gormes(db, "replay", expected["run_id"], "--file", str(segment), "--import", HANDLERS))
        assert replayed.stdout.splitlines()[-1] == f"exact: {expected['events']} events reproduced"
    assert run_gormes(db, "replay", "subagents-1").returncode != 0  # no longer in the log

    ok(run_gormes(db, "import", str(segment)))
    again = ok(run_gormes(db, "replay", "subagents-1", "--import", HANDLERS))
    assert again.stdout.splitlines()[-1].startswith("exact")
    audited = [e["data"] for e in json_lines(run_gormes(db, "tail", "--json").stdout)
               if e["type"] == "audit.operation" and e["data"]["operation"] == "log.retain"]
    assert [(a["trust"], a["outcome"]) for a in audited] == [("operator", "ok")] * 2
    assert run_gormes(db, "audit", "verify").returncode == 0

    doctor = json.loads(run_gormes(db, "doctor", "--json", timeout=300).stdout)
    checks = {c["name"]: c for c in doctor["checks"]}
    assert checks["store.positions"]["status"] == "ok", checks["store.positions"]
    assert "retention" in checks["store.positions"]["message"]
    assert checks["store.size"]["status"] == "ok" and "horizon" in checks["store.size"]["message"]


@pytest.mark.parametrize("bad", ["-5d", "soon", "3 fortnights", ""])
def test_a_bad_duration_is_one_line_and_exit_2_and_nothing_is_written(tmp_path: Path, bad: str) -> None:
    db = tmp_path / "g.db"
    ok(run_gormes(db, "append", "notes-a", "note.added", "--data", '{"text": "kept"}'))
    before = rows(db, "SELECT * FROM events")
    result = run_gormes(db, "retain", "--older-than", bad)
    assert_one_line_error(result)
    assert result.returncode == 2
    assert rows(db, "SELECT * FROM events") == before


def test_a_retention_killed_mid_way_leaves_the_log_whole(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    lines = []
    for i in range(4000):  # enough for the segment to take a while to write
        run = f"run-r{i}"
        lines.append({"stream": run, "type": "run.started", "version": 1,
                      "data": {"run_id": f"r{i}", "handler": "agent", "handler_version": "v",
                               "input": {"pad": "x" * 400}}})
        lines.append({"stream": run, "type": "run.completed", "version": 2, "data": {"result": i}})
    source = tmp_path / "runs.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    ok(run_gormes(db, "import", str(source), timeout=300))
    ok(run_gormes(db, "append", "notes-a", "note.added", "--data", '{"text": "kept"}'))
    archive = tmp_path / "g-archive"

    child = subprocess.Popen(gormes_command(db, "retain", "--older-than", "0s"), env=cli_env(), cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while child.poll() is None and not (archive.exists() and any(archive.iterdir())):
            time.sleep(0.002)  # until the segment is being written, inside the transaction
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    assert child.returncode == -signal.SIGKILL
    runs = rows(db, "SELECT count(*) FROM events WHERE stream GLOB 'run-*'")[0][0]
    records = rows(db, "SELECT count(*) FROM events WHERE type = 'log.retained'")[0][0]
    assert (runs, records) in {(8000, 0), (0, 1)}  # all of it or none
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]
    assert ok(run_gormes(db, "projections", "rebuild", "--check", timeout=300))

    finish = json.loads(ok(run_gormes(db, "retain", "--older-than", "0s", "--json", timeout=300)).stdout)
    assert finish["streams"] == (4000 if records == 0 else 0)
    if records == 0:  # this run did the work: the freed pages went back to the filesystem
        assert finish["after"]["free_bytes"] == 0 and finish["after"]["auto_vacuum"] == "incremental"
        assert finish["after"]["file_bytes"] < finish["before"]["file_bytes"] / 2
    assert rows(db, "SELECT count(*) FROM events WHERE stream GLOB 'run-*'") == [(0,)]
    [recorded] = rows(db, "SELECT data FROM events WHERE type = 'log.retained'")
    segment = archive / json.loads(recorded[0])["manifest"]["segment"]
    assert len(gzip.decompress(segment.read_bytes()).splitlines()) == 8000
    assert not list(archive.glob("*.part"))  # the killed one's partial segment is gone
    ok(run_gormes(db, "projections", "rebuild", "--check", timeout=300))


def test_retain_on_postgres_archives_and_the_projections_stay_identical(tmp_path: Path) -> None:
    from pg_helpers import fresh_schema, require_postgres, url_for_schema

    require_postgres()
    with fresh_schema() as schema:
        url = url_for_schema(schema)
        for name in ("subagents",):
            ok(run_gormes(url, "import", fixture(name)))
        refused = run_gormes(url, "retain", "--older-than", "0s")
        assert refused.returncode == 2 and "--archive" in refused.stderr
        done = json.loads(ok(run_gormes(url, "retain", "--older-than", "0s", "--archive",
                                        str(tmp_path / "pg-archive"), "--json")).stdout)
        assert done["kinds"] == {"run": 3} and done["segment"]
        ok(run_gormes(url, "projections", "rebuild", "--check", timeout=300))
        replayed = ok(run_gormes(url, "replay", "subagents-1", "--file", done["segment"], "--import", HANDLERS))
        assert replayed.stdout.splitlines()[-1].startswith("exact")


KILLED_AFTER_COMMIT = """
import os, signal, sys
import gormes.tools.retention as retention

async def killed(*args, **kwargs):  # the first step after the deleting transaction commits
    os.kill(os.getpid(), signal.SIGKILL)

retention.catch_up = killed
from gormes.cli.main import main
main(["--db", sys.argv[1], "retain", "--older-than", "0s"])
"""


def test_a_retention_killed_after_its_commit_is_audited(tmp_path: Path) -> None:
    """An attacker's finding: the audit record used to be appended after the
    deletion's commit and the refold and vacuum that follow it, so a SIGKILL there
    left a deletion no audit record names. It is now sealed in the same transaction."""
    db = tmp_path / "g.db"
    with_runs(db)
    child = subprocess.run([sys.executable, "-c", KILLED_AFTER_COMMIT, str(db)], env=cli_env(), cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    [(retained_at,)] = rows(db, "SELECT position FROM events WHERE type = 'log.retained'")
    audits = rows(db, "SELECT json_extract(data, '$.operation'), json_extract(data, '$.outcome') FROM events"
                      f" WHERE type = 'audit.operation' AND position > {retained_at}")
    assert audits == [("log.retain", "ok")]
    assert rows(db, "SELECT count(*) FROM events WHERE stream GLOB 'run-*'") == [(0,)]
    ok(run_gormes(db, "audit", "verify"))


def test_check_after_retention_rebuilds_only_up_to_the_live_position(tmp_path: Path) -> None:
    """A user audit's finding (decision 0091): the scratch rebuild of `--check`
    stopped after as many events as the live position's number, not at the
    position itself; past the gap retention leaves, it folded events the live
    projection had not reached yet and reported them missing."""
    db = tmp_path / "g.db"
    model = tmp_path / "fast.json"
    model.write_text('[{"tool_calls":[{"name":"time.now","arguments":{}}]},{"text":"fast done"}]')
    ok(run_gormes(db, "run", "agent", "--prompt", "x", "--model", f"scripted:{model}"))
    ok(run_gormes(db, "projections", "rebuild", "streams"))
    ok(run_gormes(db, "retain", "--older-than", "0s"))  # folds `streams` up to its own record
    ok(run_gormes(db, "jobs", "submit", "x"))  # appended past the live `streams` position
    [(live,)] = rows(db, "SELECT position FROM tracking WHERE projection = 'streams'")
    [(head,)] = rows(db, "SELECT max(position) FROM events")
    assert live < head
    check = run_gormes(db, "projections", "rebuild", "--check", timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"streams: identical to a rebuild at position {live}" in check.stdout
