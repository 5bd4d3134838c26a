"""`gormes fork --reply FILE | --tool-result JSON | --tool-error TEXT [--yes]` through
the real CLI (decision 0034): the replaced observation, the fork's start naming it,
`gormes replay` of the fork exact; a replacement of another kind is one line, exit
2, nothing written but the refusal's audit; without --yes the non-idempotent
operations are listed (text and --json), exit 2, nothing forked."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import assert_one_line_error, json_lines, run_gormes


def setup(tmp_path: Path, *tools: str) -> tuple[Path, Path, str, list[dict]]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("alpha\n")
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"agents": [{"replies": [
        {"tool_calls": [{"name": "fs.read", "arguments": {"path": "notes.txt"}}]},
        {"text": "notes say alpha"},
    ]}]}))
    db = tmp_path / "g.db"
    args = ["run", "agent", "--prompt", "Read the notes.", "--model", f"scripted:{script}",
            "--workspace", str(ws), "--json"]
    if tools:
        args += ["--tools", ",".join(tools)]
    ran = run_gormes(db, *args)
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]
    return db, ws, run_id, json_lines(run_gormes(db, "export", run_id).stdout)


def run_events(db: Path) -> list[dict]:
    return [e for e in json_lines(run_gormes(db, "events", "--json").stdout) if e["type"] != "audit.operation"]


def fork_audits(db: Path) -> list[str]:
    return [e["data"]["outcome"] for e in json_lines(run_gormes(db, "events", "--json").stdout)
            if e["type"] == "audit.operation" and e["data"]["operation"] == "run.fork"]


def test_a_fork_with_a_replaced_tool_error_and_reply_replays_exactly(tmp_path: Path) -> None:
    db, ws, run_id, source = setup(tmp_path, "fs.read", "fs.list")
    tool = next(e for e in source if e["type"] == "run.tool_called")
    done = run_gormes(db, "fork", run_id, "--at", str(tool["position"]), "--tool-error", "permission denied",
                      "--workspace", str(ws), "--json")
    assert done.returncode == 0, done.stderr  # read-only tools: no --yes needed
    forked = json.loads(done.stdout)
    replaced = forked["forked_from"]["replaced"]
    assert (replaced["type"], replaced["kind"], replaced["value"]) == ("run.tool_called", "tool_error",
                                                                      "permission denied")
    stream = json_lines(run_gormes(db, "export", forked["run_id"]).stdout)
    assert stream[0]["data"]["forked_from"] == forked["forked_from"]
    copied = [e["data"] for e in stream if e["type"] == "run.tool_called"]
    assert [(c["outcome"], c["error"]) for c in copied] == [("error", "permission denied")]
    replayed = run_gormes(db, "replay", forked["run_id"])
    assert replayed.returncode == 0 and replayed.stdout.startswith("exact: "), replayed.stdout + replayed.stderr

    turn = next(e for e in source if e["type"] == "run.llm_turn")
    reply = tmp_path / "reply.txt"
    reply.write_text("I will not read anything.\n")
    done = run_gormes(db, "fork", run_id, "--at", str(turn["position"]), "--reply", str(reply), "--json")
    assert done.returncode == 0, done.stderr
    forked = json.loads(done.stdout)
    assert forked["outcome"]["result"] == "I will not read anything."  # the file's last newline dropped
    assert forked["forked_from"]["replaced"]["value"]["content"] == "I will not read anything."
    assert run_gormes(db, "replay", forked["run_id"]).stdout.startswith("exact: ")


def test_a_replacement_of_another_kind_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    db, _, run_id, source = setup(tmp_path, "fs.read")
    tool = next(e for e in source if e["type"] == "run.tool_called")
    turn = next(e for e in source if e["type"] == "run.llm_turn")
    reply = tmp_path / "reply.json"
    reply.write_text('{"content": "hi"}')
    before = run_events(db)
    line = assert_one_line_error(run_gormes(db, "fork", run_id, "--at", str(tool["position"]), "--reply", str(reply)))
    assert "is a tool call, which --reply FILE cannot replace: give --tool-result JSON or --tool-error TEXT" in line
    line = assert_one_line_error(run_gormes(db, "fork", run_id, "--at", str(turn["position"]), "--tool-result", "1"))
    assert "is a model reply, which --tool-result JSON cannot replace: give --reply FILE" in line
    line = assert_one_line_error(run_gormes(db, "fork", run_id, "--at", str(tool["position"]),
                                            "--tool-result", "1", "--tool-error", "x"))
    assert "give one replacement" in line
    reply.write_text('{"content": 3}')
    line = assert_one_line_error(run_gormes(db, "fork", run_id, "--at", str(turn["position"]), "--reply", str(reply)))
    assert "reply.content" in line
    assert run_events(db) == before
    assert fork_audits(db) == ["invalid"] * 3  # the reply of the wrong shape never reached the operation


def test_without_yes_the_non_idempotent_operations_are_listed_and_nothing_is_forked(tmp_path: Path) -> None:
    db, ws, run_id, source = setup(tmp_path)  # every tool the operator may use
    tool = next(e for e in source if e["type"] == "run.tool_called")
    before = run_events(db)
    args = ("fork", run_id, "--at", str(tool["position"]), "--tool-result", '{"content": "beta"}',
            "--workspace", str(ws))
    text = run_gormes(db, *args)
    assert text.returncode == 2
    assert text.stdout.splitlines()[0] == "the live part may call these mutating, non-idempotent operations:"
    listed = [line.split()[0] for line in text.stdout.splitlines()[1:]]
    assert {"job.submit", "knowledge.write"} <= set(listed) and "fs.read" not in listed
    assert text.stderr == "gormes: error: nothing forked: give --yes to go on anyway\n"
    as_json = run_gormes(db, *args, "--json")
    assert as_json.returncode == 2
    shown = json.loads(as_json.stdout)
    assert shown["forked"] is False and [r["name"] for r in shown["needs_yes"]] == listed
    assert all(r["description"] for r in shown["needs_yes"])
    assert run_events(db) == before
    assert fork_audits(db) == ["invalid", "invalid"]

    done = run_gormes(db, *args, "--yes", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outcome"]["status"] == "completed"
