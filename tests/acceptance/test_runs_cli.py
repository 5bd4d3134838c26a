"""`gormes run`, `gormes runs list`, `gormes runs show --tree` in subprocesses,
on the real scripted provider and the real fs tools."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import assert_one_line_error, child_reads_notes_script, run_gormes


def test_run_then_list_then_show_the_tree(tmp_path: Path):
    db = tmp_path / "gormes.db"
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello\n")
    model = child_reads_notes_script(tmp_path)

    ran = run_gormes(db, "run", "agent", "--prompt", "read the notes", "--model", model,
                     "--workspace", str(ws), "--json")
    assert ran.returncode == 0, ran.stderr
    outcome = json.loads(ran.stdout)
    assert outcome["status"] == "completed" and outcome["result"] == "my child read the notes"
    run_id = outcome["run_id"]

    listed = run_gormes(db, "runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["run_id"]: r for r in json.loads(listed.stdout)}
    assert len(rows) == 2 and rows[run_id]["status"] == "completed"
    assert rows[run_id]["tokens_input"] == outcome["tokens"]["input"]
    top = run_gormes(db, "runs", "list", "--top-level", "--status", "completed", "--handler", "agent")
    assert top.returncode == 0 and top.stdout.split()[0] == run_id and len(top.stdout.splitlines()) == 1

    shown = run_gormes(db, "runs", "show", run_id, "--tree", "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["status"] == "completed" and view["iterations"] == 2
    types = [e["type"] for e in view["timeline"]]
    assert types == ["run.llm_turn", "run.child_spawned", "run.child_finished", "run.llm_turn", "run.completed"]
    (child,) = view["children"]
    assert child["depth"] == 1 and child["parent_run_id"] == run_id
    tool = next(e for e in child["timeline"] if e["type"] == "run.tool_called")
    assert tool["operation"] == "fs.read" and tool["outcome"] == "ok" and "hello" in tool["text"]
    assert view["tokens"] == outcome["tokens"]

    human = run_gormes(db, "runs", "show", run_id, "--tree")
    assert human.returncode == 0 and child["run_id"] in human.stdout and "fs.read ok" in human.stdout


def test_bad_input_is_one_line_and_a_nonzero_exit(tmp_path: Path):
    db = tmp_path / "gormes.db"
    missing = run_gormes(db, "run", "agent", "--prompt", "x", "--model", f"scripted:{tmp_path}/nope.json")
    assert missing.returncode != 0 and "nope.json" in missing.stderr and "Traceback" not in missing.stderr
    unknown = run_gormes(db, "run", "ghost", "--prompt", "x")
    assert unknown.returncode != 0 and "no run handler named 'ghost'" in unknown.stderr
    listed = run_gormes(db, "runs", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []  # nothing was recorded
    shown = run_gormes(db, "runs", "show", "NOPE")
    assert shown.returncode != 0 and "no run with id 'NOPE'" in shown.stderr
    assert "--limit must be 1..100000, got 0" in assert_one_line_error(run_gormes(db, "runs", "list", "--limit", "0"))
    assert run_gormes(db, "runs", "list", "--status", "lost").returncode == 2


def test_a_failed_run_exits_non_zero(tmp_path: Path):
    db = tmp_path / "gormes.db"
    path = tmp_path / "err.json"
    path.write_text(json.dumps([{"error": "rejected", "retryable": False}]))
    ran = run_gormes(db, "run", "agent", "--prompt", "x", "--model", f"scripted:{path}")
    assert ran.returncode == 1 and "rejected" in ran.stderr
