"""`gormes demo` (what `make demo` runs) works end to end on a fresh file, and on
a fresh PostgreSQL schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# As `make demo` runs it: from the checkout (its examples/), the venv's bin on PATH
# (the reference MCP server mcp-server-time, a dev dependency, is there).
ENV = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def gormes(db, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gormes", "--db", str(db), *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, env=ENV,
    )


def events_of(db, type_: str) -> list[dict]:
    out = gormes(db, "events", "--type", type_, "--json").stdout
    return [json.loads(line) for line in out.splitlines()]


def test_demo_runs_and_leaves_a_consistent_log(tmp_path):
    check_demo(tmp_path / "demo" / "gormes.db")


def test_demo_runs_on_postgres():
    from pg_helpers import fresh_schema, url_for_schema

    with fresh_schema() as schema:
        out = check_demo(url_for_schema(schema))
        assert f"--db '{url_for_schema(schema)}' replay " in out


def check_demo(db) -> str:
    result = gormes(db, "demo")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "streams projection" in out and "job ledger" in out

    events = [json.loads(line) for line in gormes(db, "events", "--json").stdout.splitlines()]
    assert [e["position"] for e in events] == list(range(1, len(events) + 1))
    notes = [e for e in events if e["type"] == "note.added"]
    # every note the follower printed is in the log, in order
    for note in notes:
        assert note["data"]["text"] in out
    # the coordinator recorded both children finishing
    assert sum("finished" in n["data"]["text"] for n in notes if n["stream"] == "agent-coordinator") == 2

    jobs = json.loads(gormes(db, "jobs", "list", "--json").stdout)
    assert len(jobs) == 5 and {j["status"] for j in jobs} == {"completed"}
    parent = next(j for j in jobs if j["name"] == "summarize")
    children = [j for j in jobs if j["parent_id"] == parent["id"]]
    assert len(children) == 3
    assert parent["tokens"]["input"] == 300 + sum(c["tokens"]["input"] for c in children)
    flaky = next(j for j in jobs if j["name"] == "flaky")
    assert flaky["attempts_made"] == 2

    all_runs = json.loads(gormes(db, "runs", "list", "--json").stdout)
    assert len(all_runs) == 5 and {r["status"] for r in all_runs} == {"completed"}
    # step 6: the user's run handler from examples/trip.py, with its scout subagent
    trip = next(r for r in all_runs if r["handler"] == "trip")
    assert [r["depth"] for r in all_runs if r["parent_run_id"] == trip["run_id"]] == [1]
    root = next(r for r in all_runs if r["parent_run_id"] is None and r["handler"] == "agent")
    runs = [r for r in all_runs if r is root or r["parent_run_id"] == root["run_id"]]
    assert sorted(r["depth"] for r in runs) == [0, 1, 1]
    assert root["tokens_input"] > sum(r["tokens_input"] for r in runs if r is not root)
    steered = [
        e for e in events_of(db, "run.inbox_read")
        if e["data"]["messages"] and "version cache" in e["data"]["messages"][0]["payload"]
    ]
    assert len(steered) == 1  # the operator's message reached the scout mid-run
    tools = {e["data"]["operation"] for e in events_of(db, "run.tool_called")}
    # the built-ins, the user's operation, and the reference MCP server's tool
    assert tools == {"fs.list", "fs.read", "fs.grep", "units.convert", "mcp.time.get_current_time"}
    assert all(e["data"]["outcome"] == "ok" for e in events_of(db, "run.tool_called"))

    assert "exact: " in out  # the demo replayed the run tree itself
    replayed = gormes(db, "replay", root["run_id"], "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    report = json.loads(replayed.stdout)
    assert report["exact"] is True and len(report["children"]) == 2

    mine = gormes(db, "replay", trip["run_id"], "--import", "examples/trip.py", "--json")
    assert mine.returncode == 0, mine.stdout + mine.stderr
    assert json.loads(mine.stdout)["exact"] is True

    check = gormes(db, "projections", "rebuild", "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    return out
