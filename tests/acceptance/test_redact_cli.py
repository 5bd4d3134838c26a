"""`gormes redact` in subprocesses (issue 18, decision 0026): the operator redacts
a stream or an event, audited (a gateway caller's denial: tests/tools/test_log_redact.py); a
redaction killed with SIGKILL mid-way leaves a log where every redaction is
whole, the projections check clean against a rebuild and the audit chain
verifies; running it again finishes it."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import trio
from cli_helpers import REPO, cli_env, gormes_command, json_lines, rows, run_gormes

from gormes.events.memory import MemoryFactRecorded, Origin, Provenance, fact_id
from gormes.events.notes import NoteAdded
from gormes.events.sqlite import SQLiteEventStore

SCOPE = "project:default"
FACTS = 20_000  # 40 transactions of 500: the kill lands between two of them


def fact(i: int) -> MemoryFactRecorded:
    text = f"secret number {i:05d} of the big stream"
    return MemoryFactRecorded(
        fact_id=fact_id(SCOPE, text), text=text, review_state="trusted",
        provenance=Provenance(origin=Origin(artifact="t"), kind="manual", scope=SCOPE,
                              first_seen=float(i), last_seen=float(i), evidence_hash="e"),
    )


def write(db: Path, stream: str, events: list) -> None:
    async def go() -> None:
        async with SQLiteEventStore.open(db) as store:
            for i in range(0, len(events), 1000):
                await store.append(stream, events[i : i + 1000])
    trio.run(go)



def test_the_operator_redacts_an_event_and_a_stream(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    write(db, "notes-a", [NoteAdded(text="keep"), NoteAdded(text="the password is hunter2")])
    write(db, "notes-b", [NoteAdded(text="hunter2 again"), NoteAdded(text="and again hunter2")])
    one = run_gormes(db, "redact", "--position", "2", "--reason", "a leaked password", "--json")
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["positions"] == [2]
    whole = run_gormes(db, "redact", "--stream", "notes-b", "--reason", "the same")
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout.startswith("redacted 2 event(s) in notes-b")
    export = run_gormes(db, "export")
    assert "hunter2" not in export.stdout and "keep" in export.stdout
    wal = db.with_name(db.name + "-wal")
    assert b"hunter2" not in db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")  # secure_delete, WAL truncated
    audited = [e["data"] for e in json_lines(run_gormes(db, "tail", "--json").stdout)
               if e["type"] == "audit.operation" and e["data"]["operation"] == "log.redact"]
    assert [(a["trust"], a["outcome"]) for a in audited] == [("operator", "ok")] * 2
    assert run_gormes(db, "audit", "verify").returncode == 0
    again = run_gormes(db, "redact", "--stream", "audit-*", "--reason", "x")
    assert again.returncode == 2 and "never redacted" in again.stderr


def test_a_redaction_killed_mid_way_leaves_the_log_consistent(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    stream = f"memory-{SCOPE}"
    write(db, stream, [fact(i) for i in range(FACTS)])
    write(db, "notes-a", [NoteAdded(text="untouched")])
    assert run_gormes(db, "recall", "secret number 00007", timeout=300).returncode == 0  # the projection holds them

    child = subprocess.Popen(gormes_command(db, "redact", "--stream", stream, "--reason", "all of it"),
                             env=cli_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while child.poll() is None and not rows(db, "SELECT 1 FROM events WHERE type = 'log.redacted' LIMIT 1"):
            time.sleep(0.01)  # until the first redaction has committed
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    assert child.returncode == -signal.SIGKILL

    records = [json.loads(d) for (d,) in rows(db, "SELECT data FROM events WHERE type = 'log.redacted'")]
    listed = {e["position"] for r in records for e in r["entries"]}
    tombstoned = {p for (p,) in rows(db, "SELECT position FROM events WHERE type_version = 0")}
    assert listed == tombstoned and 0 < len(tombstoned) < FACTS  # whole transactions only, and not all
    intact = rows(db, f"SELECT data FROM events WHERE stream = '{stream}' AND type_version = 1")
    assert len(intact) == FACTS - len(tombstoned) and all("secret number" in d for (d,) in intact)

    check = run_gormes(db, "projections", "rebuild", "--check", timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert run_gormes(db, "audit", "verify").returncode == 0

    finish = run_gormes(db, "redact", "--stream", stream, "--reason", "all of it", "--json", timeout=300)
    assert finish.returncode == 0, finish.stderr
    assert json.loads(finish.stdout)["redacted"] == FACTS - len(tombstoned)
    assert rows(db, f"SELECT count(*) FROM events WHERE stream = '{stream}' AND type_version != 0") == [(0,)]
    assert rows(db, "SELECT count(*) FROM memory_facts") == [(0,)]
    assert run_gormes(db, "projections", "rebuild", "--check", timeout=300).returncode == 0
    assert b"secret number" not in db.read_bytes()
