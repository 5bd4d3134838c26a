"""`gormes eval runs` through the real CLI: three recorded runs re-run on another
scripted model, by id and by filter, with the per-run report as --json and text;
the --yes gate; bad input one line (decision 0034)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import assert_one_line_error, json_lines, run_gormes

PROMPTS = ("ALPHA read the notes", "BETA list the files", "GAMMA just answer")


def scripts(tmp_path: Path) -> tuple[str, str]:
    """The recording model (one agent per prompt) and the one the eval re-runs on."""
    first = tmp_path / "first.json"
    first.write_text(json.dumps({"agents": [
        {"match": "ALPHA", "replies": [{"tool_calls": [{"name": "fs.read", "arguments": {"path": "notes.txt"}}]},
                                       {"text": "alpha", "usage": {"input": 100, "output": 10}}]},
        {"match": "BETA", "replies": [{"tool_calls": [{"name": "fs.list", "arguments": {"path": "."}}]},
                                      {"text": "one file"}]},
        {"match": "GAMMA", "replies": [{"text": "forty-two"}]},
    ]}))
    second = tmp_path / "second.json"
    second.write_text(json.dumps({"agents": [
        {"match": "ALPHA", "replies": [{"tool_calls": [{"name": "fs.list", "arguments": {"path": "."}}]},
                                       {"text": "alpha", "usage": {"input": 40, "output": 4}}]},
        {"match": "BETA", "replies": [{"tool_calls": [{"name": "fs.list", "arguments": {"path": "."}}]},
                                      {"text": "one file"}]},
        {"match": "GAMMA", "replies": [{"tool_calls": [{"name": "time.now", "arguments": {}}]},
                                       {"text": "forty-three"}]},
    ]}))
    return f"scripted:{first}", f"scripted:{second}"


def record(tmp_path: Path) -> tuple[Path, Path, list[str], str]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("alpha\n")
    first, second = scripts(tmp_path)
    db = tmp_path / "g.db"
    ids = []
    for prompt in PROMPTS:
        ran = run_gormes(db, "run", "agent", "--prompt", prompt, "--model", first, "--workspace", str(ws),
                         "--tools", "fs.read,fs.list", "--json")
        assert ran.returncode == 0, ran.stderr
        ids.append(json.loads(ran.stdout)["run_id"])
    return db, ws, ids, second


def run_starts(db: Path) -> list[dict]:
    return [e for e in json_lines(run_gormes(db, "events", "--json").stdout) if e["type"] == "run.started"]


def test_eval_runs_reports_what_changed_per_run(tmp_path: Path) -> None:
    db, ws, ids, second = record(tmp_path)
    done = run_gormes(db, "eval", "runs", *ids, "--model", second, "--workspace", str(ws), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["model"], report["changed"], report["failed"]) == (second, 2, 0)
    by_id = {e["run_id"]: e for e in report["runs"]}
    assert list(by_id) == ids
    alpha, beta, gamma = (by_id[i] for i in ids)
    # ALPHA: another tool, the same answer, fewer tokens
    assert (alpha["answer_changed"], alpha["tools_changed"]) == (False, True)
    assert (alpha["original"]["tools"], alpha["rerun"]["tools"]) == (["fs.read"], ["fs.list"])
    assert alpha["original"]["tokens"]["input"] > alpha["rerun"]["tokens"]["input"]
    # BETA: nothing changed
    assert (beta["answer_changed"], beta["tools_changed"], beta["status_changed"]) == (False, False, False)
    # GAMMA: another answer
    assert (gamma["original"]["answer"], gamma["rerun"]["answer"]) == ("forty-two", "forty-three")
    assert gamma["answer_changed"] and gamma["tools_changed"]
    # the re-run keeps the run's allowlist (fs.read, fs.list): time.now was refused
    assert (gamma["original"]["tools"], gamma["rerun"]["tools"]) == ([], ["time.now (denied)"])
    for e in report["runs"]:
        assert e["rerun"]["model"] == second and e["rerun"]["status"] == "completed"
        assert e["original"]["cost"] == e["rerun"]["cost"] == 0.0  # the shipped table prices scripted at $0
    # each re-run is a fork of its run from its start, nothing copied, audited as run.fork
    forks = {e["data"]["run_id"]: e["data"] for e in run_starts(db) if e["data"].get("forked_from")}
    assert {f["forked_from"]["run_id"] for f in forks.values()} == set(ids)
    assert {e["rerun"]["run_id"] for e in report["runs"]} == set(forks)
    for e in report["runs"]:
        replayed = run_gormes(db, "replay", e["rerun"]["run_id"])
        assert replayed.stdout.startswith("exact: "), replayed.stdout + replayed.stderr

    # by filter, as text: the forks just made are left out, so the same three runs
    text = run_gormes(db, "eval", "runs", "--handler", "agent", "--status", "completed", "--model", second,
                      "--workspace", str(ws))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"eval of 3 run(s) re-run with model {second}"
    assert "  answer: forty-two -> forty-three" in lines
    assert "  tools:  fs.read -> fs.list" in lines and "  tools:  none -> time.now (denied)" in lines
    assert lines[-1] == "2 of 3 changed; 0 not re-run"


def test_eval_runs_asks_for_yes_and_refuses_bad_input(tmp_path: Path) -> None:
    db, ws, ids, second = record(tmp_path)
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("GAMMA once more\n")
    ran = run_gormes(db, "run", "agent", "--prompt", "GAMMA anything", "--model", second, "--json")  # every tool
    open_run = json.loads(ran.stdout)["run_id"]
    before = len(run_starts(db))
    refused = run_gormes(db, "eval", "runs", ids[0], open_run, "--prompt", str(prompt), "--json")
    assert refused.returncode == 2
    assert "job.submit" in [r["name"] for r in json.loads(refused.stdout)["needs_yes"]]
    assert len(run_starts(db)) == before  # nothing re-run
    done = run_gormes(db, "eval", "runs", open_run, "--prompt", str(prompt), "--model", second, "--yes", "--json")
    assert done.returncode == 0, done.stderr
    (only,) = json.loads(done.stdout)["runs"]
    assert json.loads(done.stdout)["overrides"] == {"prompt": "GAMMA once more"}
    assert (only["original"]["answer"], only["rerun"]["answer"]) == ("forty-three", "forty-three")

    for args, message in (
        ((ids[0], "--handler", "agent", "--model", second), "not both"),
        ((ids[0],), "give --model, --prompt or --set"),
        (("no-such-run", "--model", second), "no run 'no-such-run'"),
        (("--status", "completed", "--handler", "nobody", "--model", second), "no recorded run matches"),
        (("--since", "yesterday-ish", "--model", second), "invalid time"),
    ):
        assert message in assert_one_line_error(run_gormes(db, "eval", "runs", *args))
