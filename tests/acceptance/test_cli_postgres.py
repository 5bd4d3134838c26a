"""The everyday commands on PostgreSQL: the real `gormes` CLI in subprocesses,
`--db postgresql://...` naming a fresh schema per test.

cron, run/runs/replay/fork, export/import of a run, ops call, skills route
(recording a selection) and an MCP client over stdio submitting and listing a
job. Each subprocess runs in the test's tmp dir, never the repo. Skipped, with
the reason, only when the server cannot be reached.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_helpers import fresh_schema, url_for_schema

from cli_helpers import child_reads_notes_script, cli_env, gormes_command, promotable


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_schema() as name:
        yield url_for_schema(name)


def gormes(url: str, cwd: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        gormes_command(url, *args), capture_output=True, text=True, env=cli_env(),
        timeout=timeout, cwd=cwd,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


# -- cron ---------------------------------------------------------------------


def test_cron_add_list_pause_resume_remove(url: str, tmp_path: Path):
    added = ok(gormes(url, tmp_path, "cron", "add", "nightly", "--schedule", "0 3 * * *",
                      "--job", "report", "--data", '{"full": true}', "--queue", "ops"))
    assert added.startswith("added nightly: 0 3 * * * -> report on queue ops; next fire ")

    rows = json.loads(ok(gormes(url, tmp_path, "cron", "list", "--json")))
    assert [(r["name"], r["schedule"], r["job"], r["data"], r["queue"], r["status"], r["fires"])
            for r in rows] == [("nightly", "0 3 * * *", "report", {"full": True}, "ops", "active", 0)]
    assert rows[0]["next_fire"].endswith("03:00:00Z")

    assert ok(gormes(url, tmp_path, "cron", "pause", "nightly")) == "paused nightly (now paused)\n"
    table = ok(gormes(url, tmp_path, "cron", "list"))
    assert "nightly" in table and "paused" in table
    assert ok(gormes(url, tmp_path, "cron", "resume", "nightly")) == "resumed nightly (now active)\n"
    assert ok(gormes(url, tmp_path, "cron", "remove", "nightly")) == "removed nightly (now removed)\n"
    assert ok(gormes(url, tmp_path, "cron", "list")) == "no schedules\n"
    assert list(tmp_path.iterdir()) == []  # no SQLite file was made anywhere


# -- run, runs list|show, replay, export/import of a run, fork ---------------------


def test_run_an_agent_then_list_show_replay_export_import_and_fork(url: str, tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello\n")
    model = child_reads_notes_script(tmp_path)

    outcome = json.loads(ok(gormes(url, tmp_path, "run", "agent", "--prompt", "read the notes",
                                   "--model", model, "--workspace", str(ws), "--json")))
    assert outcome["status"] == "completed" and outcome["result"] == "my child read the notes"
    run_id = outcome["run_id"]

    rows = {r["run_id"]: r for r in json.loads(ok(gormes(url, tmp_path, "runs", "list", "--json")))}
    assert len(rows) == 2 and rows[run_id]["status"] == "completed"
    assert rows[run_id]["tokens_input"] == outcome["tokens"]["input"]
    (child_id,) = [r for r in rows if r != run_id]
    assert rows[child_id]["parent_run_id"] == run_id and rows[child_id]["depth"] == 1
    assert run_id in ok(gormes(url, tmp_path, "runs", "list"))

    view = json.loads(ok(gormes(url, tmp_path, "runs", "show", run_id, "--tree", "--json")))
    assert view["status"] == "completed" and view["iterations"] == 2
    assert [e["type"] for e in view["timeline"]] == [
        "run.llm_turn", "run.child_spawned", "run.child_finished", "run.llm_turn", "run.completed"]
    (child,) = view["children"]
    tool = next(e for e in child["timeline"] if e["type"] == "run.tool_called")
    assert tool["operation"] == "fs.read" and tool["outcome"] == "ok" and "hello" in tool["text"]
    assert "fs.read ok" in ok(gormes(url, tmp_path, "runs", "show", run_id, "--tree"))

    report = json.loads(ok(gormes(url, tmp_path, "replay", run_id, "--json")))
    assert (report["exact"], report["divergence"], report["status"]) == (True, None, "completed")
    assert [c["status"] for c in report["children"]] == ["completed"]
    events = report["events"]
    assert ok(gormes(url, tmp_path, "replay", run_id)) == f"exact: {events} events reproduced\n"

    # export the run with its child, import it into another schema, replay it there
    exported = ok(gormes(url, tmp_path, "export", run_id, "--children"))
    lines = [json.loads(line) for line in exported.splitlines()]
    assert {line["stream"] for line in lines} == {f"run-{run_id}", f"run-{child_id}"}
    assert [line["position"] for line in lines] == sorted(line["position"] for line in lines)
    out = tmp_path / "run.jsonl"
    ok(gormes(url, tmp_path, "export", run_id, "--children", "--out", str(out)))
    assert out.read_text() == exported
    file_replay = ok(gormes(url, tmp_path, "replay", "--file", str(out)))
    assert file_replay == f"exact: {events} events reproduced\n"
    with fresh_schema() as other:
        other_url = url_for_schema(other)
        imported = json.loads(ok(gormes(other_url, tmp_path, "import", str(out), "--json")))
        assert imported == {"imported": len(lines), "first_position": 1, "last_position": len(lines),
                            "recorded_at": len(lines) + 1, "sha256": hashlib.sha256(out.read_bytes()).hexdigest()}
        assert ok(gormes(other_url, tmp_path, "replay", run_id)) == f"exact: {events} events reproduced\n"
        again = gormes(other_url, tmp_path, "import", str(out))  # the versions say: already there
        assert again.returncode != 0 and "already imported?" in again.stderr
        own = [json.loads(line) for line in ok(gormes(other_url, tmp_path, "export", run_id)).splitlines()]
        # import gives new positions and times; everything else is as recorded
        strip = lambda line: {k: v for k, v in line.items() if k not in ("position", "recorded_at")}  # noqa: E731
        assert [strip(line) for line in own] == [strip(line) for line in lines if line["stream"] == f"run-{run_id}"]

    # fork the run after its first model turn, continuing with another script
    first_turn = next(e for e in view["timeline"] if e["type"] == "run.llm_turn")
    script = tmp_path / "fork.json"
    # the first reply is the recorded turn's (copied, not asked again)
    script.write_text(json.dumps({"agents": [{"replies": [{"text": "not asked"}, {"text": "forked and done"}]}]}))
    forked = json.loads(ok(gormes(url, tmp_path, "fork", run_id, "--at", str(first_turn["position"]),
                                  "--model", f"scripted:{script}", "--workspace", str(ws), "--yes", "--json")))
    assert forked["forked_from"] == {"run_id": run_id, "position": first_turn["position"]}
    assert (forked["outcome"]["status"], forked["outcome"]["result"]) == ("completed", "forked and done")
    assert ok(gormes(url, tmp_path, "replay", forked["run_id"])).startswith("exact: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fork.json", "run.jsonl", "script.json", "ws"]


# -- ops ------------------------------------------------------------------------------


def test_ops_list_schema_and_call(url: str, tmp_path: Path):
    names = {o["name"] for o in json.loads(ok(gormes(url, tmp_path, "ops", "list", "--json")))}
    assert {"job.submit", "run.list", "memory.recall"} <= names
    assert json.loads(ok(gormes(url, tmp_path, "ops", "schema", "--trust", "gateway")))

    job = json.loads(ok(gormes(url, tmp_path, "ops", "call", "job.submit", '{"name": "report", "data": {"n": 1}}')))
    assert (job["name"], job["status"]) == ("report", "waiting")
    listed = json.loads(ok(gormes(url, tmp_path, "ops", "call", "job.list", '{"status": "waiting"}')))
    assert [j["id"] for j in listed["jobs"]] == [job["id"]]
    jobs = json.loads(ok(gormes(url, tmp_path, "jobs", "list", "--json")))
    assert [j["id"] for j in jobs] == [job["id"]]
    assert json.loads(ok(gormes(url, tmp_path, "ops", "call", "run.list", '{"status": "completed"}'))) == {"runs": []}
    audited = [json.loads(line) for line in ok(gormes(url, tmp_path, "events", "--type", "audit.operation",
                                                       "--json")).splitlines()]
    assert [(a["data"]["operation"], a["data"]["outcome"]) for a in audited] == [
        ("job.submit", "ok"), ("job.list", "ok"), ("run.list", "ok")]

    # memory runs on PostgreSQL too
    remembered = json.loads(ok(gormes(url, tmp_path, "ops", "call", "memory.remember", '{"fact": "Ada likes tea"}')))
    recalled = json.loads(ok(gormes(url, tmp_path, "ops", "call", "memory.recall", '{"query": "tea"}')))
    assert [h["id"] for h in recalled["hits"]] == remembered["ids"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["runs", "list"], ["replay", "run-x"], ["cron", "list"], ["ops", "call", "time.now"]])
def test_an_unreachable_server_is_one_line_and_no_file(tmp_path: Path, args: list[str]):
    done = gormes("postgresql://nobody@127.0.0.1:1/nowhere", tmp_path, *args)
    assert done.returncode != 0 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("gormes: error: cannot connect to PostgreSQL at postgresql://nobody@127.0.0.1:1/")
    assert list(tmp_path.iterdir()) == []


# -- skills that record events ----------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def test_skills_route_feedback_usage_and_promote(url: str, tmp_path: Path):
    skills = str(REPO / "skills")
    ok(gormes(url, tmp_path, "append", "run-r1", "run.started",
              "--data", '{"run_id": "r1", "handler": "agent", "handler_version": "v"}'))
    routed = ok(gormes(url, tmp_path, "skills", "route", "why did my run fail", "--candidates",
                       "--run", "r1", "--skills-dir", skills))
    # position 2 is the append's audit record, 4 the route's, 6 the second append's (decision 0019)
    assert "recorded skill.selected at position 3 for run r1" in routed
    ok(gormes(url, tmp_path, "append", "run-r1", "run.completed", "--data", "{}"))
    assert ok(gormes(url, tmp_path, "skills", "feedback", "r1", "replay-forensics", "good")) == (
        "recorded skill.feedback at position 7\n")
    rows = json.loads(ok(gormes(url, tmp_path, "skills", "usage", "--json")))
    assert [(r["skill"], r["run_id"], r["outcome"], r["feedback"]) for r in rows] == [
        ("replay-forensics", "r1", "completed", "good")]
    assert json.loads(ok(gormes(url, tmp_path, "skills", "usage", "--skill", "nope", "--json"))) == []
    unknown = gormes(url, tmp_path, "skills", "route", "replay", "--candidates", "--run", "ghost",
                     "--skills-dir", skills)
    assert unknown.returncode != 0 and unknown.stderr == "gormes: error: no run 'ghost' in this database\n"

    root = promotable(tmp_path)
    promoted = json.loads(ok(gormes(url, tmp_path, "skills", "promote", "alpha", "--skills-dir", str(root), "--json")))
    # after the audit records of feedback (6) and of the refused route (7)
    assert (promoted["to_status"], promoted["position"]) == ("proven", 10)
    (event,) = [json.loads(line) for line in ok(gormes(url, tmp_path, "events", "--type", "skill.promoted",
                                                        "--json")).splitlines()]
    assert (event["stream"], event["data"]["from"], event["data"]["to"]) == ("skill-alpha", "candidate", "proven")
