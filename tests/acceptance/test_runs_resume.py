"""`gormes runs resume RUN`: an interrupted foreground run continues as a new run
with `resumed_from`; its recorded steps are replayed, not redone (the tool's side
effect happens once); what cannot be resumed is refused in one line, nothing
written."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import msgspec
from cli_helpers import REPO, assert_one_line_error, cli_env, gormes_command, run_gormes

from gormes.actors.runs.process import this_process
from gormes.events.runs import RunStarted, run_stream
from gormes.events.sqlite_log import SQLiteLog

TOOL_THEN_ANSWER = [{"tool_calls": [{"name": "memory.remember", "arguments": {"fact": "once"}}]}]


def write_script(path: Path, answer_delay_ms: int) -> str:
    path.write_text(json.dumps({"agents": [{"replies": [
        *TOOL_THEN_ANSWER, {"text": "resumed answer", "delay_ms": answer_delay_ms}]}]}))
    return f"scripted:{path}"


def start_run(db: Path, model: str) -> tuple[subprocess.Popen, str]:
    """`gormes run` in the background, once its tool has run and it waits on its slow
    second turn, with nothing more to record until that turn answers: (process, run id)."""
    proc = subprocess.Popen(gormes_command(db, "run", "agent", "--prompt", "work", "--model", model),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO)
    assert proc.stdout is not None
    try:
        run_id = proc.stdout.readline().split()[1]
        deadline = time.monotonic() + 30
        while not waits_on_its_second_turn(db, run_id):
            assert time.monotonic() < deadline and proc.poll() is None, "the run never reached its second turn"
            time.sleep(0.05)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc, run_id


def waits_on_its_second_turn(db: Path, run_id: str) -> bool:
    """The run's stream ends with the inbox read that precedes its second model
    turn: its tool call, and the read after it, are recorded (a check made only
    after the tool's audit raced that read)."""
    conn = sqlite3.connect(db, timeout=30)
    try:
        types = [t for (t,) in conn.execute(
            "SELECT type FROM events WHERE stream = ? ORDER BY position", (run_stream(run_id),))]
    except sqlite3.OperationalError:  # no table yet
        return False
    finally:
        conn.close()
    return "run.tool_called" in types and types[-1] == "run.inbox_read"


def executions(db: Path, operation: str) -> int:
    conn = sqlite3.connect(db, timeout=30)
    try:
        rows = conn.execute("SELECT data FROM events WHERE type = 'audit.operation'").fetchall()
    finally:
        conn.close()
    return sum(1 for (d,) in rows if json.loads(d)["operation"] == operation and json.loads(d)["outcome"] == "ok")


def runs_by_id(db: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in json.loads(run_gormes(db, "runs", "list", "--json").stdout)}


def assert_only_refusal_audits(db: Path, before: int, count: int) -> None:
    """Nothing was written after `before` but `count` refusals' audit records
    (run.resume, invalid): a refusal is audited, and changes nothing else."""
    with sqlite3.connect(db) as conn:
        written = conn.execute("SELECT type, data FROM events WHERE position > ?", (before,)).fetchall()
    assert [t for t, _ in written] == ["audit.operation"] * count
    assert {(json.loads(d)["operation"], json.loads(d)["outcome"]) for _, d in written} == {("run.resume", "invalid")}


def head(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT max(position) FROM events").fetchone()[0]
    finally:
        conn.close()


def test_an_interrupted_run_resumes_without_redoing_its_steps(tmp_path: Path) -> None:
    db, script = tmp_path / "g.db", tmp_path / "model.json"
    proc, old = start_run(db, write_script(script, 60_000))
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert runs_by_id(db)[old]["status"] == "cancelled"

    write_script(script, 0)  # the model answers at once from now on
    resumed = run_gormes(db, "runs", "resume", old)
    assert resumed.returncode == 0, resumed.stderr
    first, last = resumed.stdout.splitlines()[:2]
    new = first.split()[1]
    assert first == f"run {new} started: resumes run {old}"
    assert last.startswith(f"run {new} (resumes run {old}, ") and " completed " in last
    assert resumed.stdout.splitlines()[2] == "resumed answer"
    assert executions(db, "memory.remember") == 1  # replayed, not done again
    row = runs_by_id(db)[new]
    assert (row["status"], row["iterations"]) == ("completed", 2)
    shown = json.loads(run_gormes(db, "runs", "show", new, "--json").stdout)
    assert shown["resumed_from"]["run_id"] == old
    replayed = run_gormes(db, "replay", new)
    assert replayed.returncode == 0 and replayed.stdout.startswith("exact:"), replayed.stdout

    # resuming the same run twice would do its live part twice: refused
    before = head(db)
    error = assert_one_line_error(run_gormes(db, "runs", "resume", old))
    assert f"already resumed as run {new}" in error
    # a completed run, an unknown one: nothing to resume
    assert "nothing to resume" in assert_one_line_error(run_gormes(db, "runs", "resume", new))
    assert "no run 'nope'" in assert_one_line_error(run_gormes(db, "runs", "resume", "nope"))
    assert_only_refusal_audits(db, before, 3)


def test_a_killed_run_reads_as_cut_off_and_resumes_without_force(tmp_path: Path) -> None:
    db, script = tmp_path / "g.db", tmp_path / "model.json"
    proc, old = start_run(db, write_script(script, 60_000))

    # while its process runs it, it is not resumed, forced or not
    before = head(db)
    listed = runs_by_id(db)[old]
    assert (listed["status"], listed["process"], listed["pid"]) == ("running", "alive", proc.pid)
    for extra in ((), ("--force",)):
        error = assert_one_line_error(run_gormes(db, "runs", "resume", old, *extra))
        assert f"process {proc.pid} on " in error and "is still running it" in error
    assert_only_refusal_audits(db, before, 2)

    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    listed = runs_by_id(db)[old]
    assert (listed["status"], listed["process"]) == ("running", "gone")  # no end: nobody could record one
    text = run_gormes(db, "runs", "list").stdout
    assert f"its process {proc.pid} on {listed['host']} is gone: cut off" in text
    shown = json.loads(run_gormes(db, "runs", "show", old, "--json").stdout)
    assert shown["process"] == {"host": listed["host"], "pid": proc.pid, "state": "gone"}
    assert f"process {proc.pid} on {listed['host']}: gone: the run was cut off" in run_gormes(
        db, "runs", "show", old).stdout

    write_script(script, 0)
    resumed = run_gormes(db, "runs", "resume", old, "--json")
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["outcome"]["status"] == "completed" and report["resumed_from"]["run_id"] == old
    row = runs_by_id(db)[old]
    assert (row["status"], row["error"], row["process"]) == (
        "cancelled", f"cut off: its process {proc.pid} on {listed['host']} is gone", None)
    assert json.loads(run_gormes(db, "runs", "show", old, "--json").stdout)["process"]["state"] is None
    assert executions(db, "memory.remember") == 1


def test_a_run_whose_process_cannot_be_checked_is_resumed_only_with_force(tmp_path: Path) -> None:
    db, script = tmp_path / "g.db", tmp_path / "model.json"
    model = write_script(script, 0)
    here = this_process()
    log = SQLiteLog(db)
    try:
        for run_id, process in (
            ("on-another-host", msgspec.structs.replace(here, host="far", machine="another-machine")),
            ("in-another-container", msgspec.structs.replace(here, pid_namespace="pid:[1]")),
            ("from-before", None),
        ):
            log.append_now(run_stream(run_id), [RunStarted(
                run_id=run_id, handler="agent", handler_version="v", input={"prompt": "work"},
                model=model, process=process)])
    finally:
        log.close()
    rows = runs_by_id(db)
    assert [rows[r]["process"] for r in ("on-another-host", "in-another-container", "from-before")] == [
        "elsewhere", "elsewhere", None]
    before = head(db)
    error = assert_one_line_error(run_gormes(db, "runs", "resume", "on-another-host"))
    assert f"its process {here.pid} on far cannot be checked from here" in error and "--force" in error
    error = assert_one_line_error(run_gormes(db, "runs", "resume", "from-before"))
    assert "names no process" in error and "--force" in error
    assert_only_refusal_audits(db, before, 2)

    resumed = run_gormes(db, "runs", "resume", "in-another-container", "--force", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["outcome"]["status"] == "completed"
    row = runs_by_id(db)["in-another-container"]
    assert row["status"] == "cancelled" and row["error"].startswith("cut off: its process declared gone")


def test_a_job_s_run_and_a_subagent_are_refused(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    log = SQLiteLog(db)
    try:
        log.append_now(run_stream("of-a-job"), [RunStarted(run_id="of-a-job", handler="agent", handler_version="v",
                                                           job_id="J1")])
        log.append_now(run_stream("child"), [RunStarted(run_id="child", handler="agent", handler_version="v",
                                                        parent_run_id="p", depth=1)])
    finally:
        log.close()
    assert "gormes jobs resume J1" in assert_one_line_error(run_gormes(db, "runs", "resume", "of-a-job"))
    assert "subagent of run p" in assert_one_line_error(run_gormes(db, "runs", "resume", "child"))


def spawn_and_submit_script(path: Path, child_delay_ms: int) -> str:
    """The parent's one turn submits a job and spawns a child (the agent starts the
    spawn first, then makes the call); the child answers after `child_delay_ms`."""
    path.write_text(json.dumps({"agents": [
        {"match": "Role: child", "replies": [{"text": "child done", "delay_ms": child_delay_ms}]},
        {"replies": [
            {"tool_calls": [{"name": "job.submit", "arguments": {"name": "echo", "data": {"n": 1}}},
                            {"name": "agent.spawn", "arguments": {"prompt": "Role: child"}}]},
            {"text": "parent done"},
        ]},
    ]}))
    return f"scripted:{path}"


def test_a_call_made_after_an_unfinished_spawn_is_not_made_again(tmp_path: Path) -> None:
    """An attacker's finding: the resumed prefix is cut before the first child that
    had not finished, and the parent's calls recorded after that spawn ran again
    live (a second job submitted). They are served from the earlier run's record."""
    db, script = tmp_path / "g.db", tmp_path / "model.json"
    proc = subprocess.Popen(gormes_command(db, "run", "agent", "--prompt", "Role: parent", "--model",
                                           spawn_and_submit_script(script, 60_000)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO)
    assert proc.stdout is not None
    try:
        old = proc.stdout.readline().split()[1]
        deadline = time.monotonic() + 30
        while not executions(db, "job.submit"):
            assert time.monotonic() < deadline and proc.poll() is None, "the parent never submitted"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert runs_by_id(db)[old]["status"] == "cancelled"

    spawn_and_submit_script(script, 0)
    resumed = run_gormes(db, "runs", "resume", old)
    assert resumed.returncode == 0, resumed.stderr
    new = resumed.stdout.split()[1]
    assert executions(db, "job.submit") == 1  # served from the earlier run's record
    jobs = json.loads(run_gormes(db, "jobs", "list", "--json").stdout)
    assert [j["name"] for j in jobs] == ["echo"]
    log = SQLiteLog(db, readonly=True, create=False)
    try:
        calls = [r.event for r in log.read_stream(run_stream(new)) if r.event.type == "run.tool_called"]
    finally:
        log.close()
    assert [(c.operation, c.outcome, c.result["id"]) for c in calls] == [("job.submit", "ok", jobs[0]["id"])]
    replayed = run_gormes(db, "replay", new)
    assert replayed.returncode == 0 and replayed.stdout.startswith("exact:"), replayed.stdout
