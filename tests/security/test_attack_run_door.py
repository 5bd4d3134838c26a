"""The door for runs the operator starts: `gormes run`, `gormes fork` and `gormes
runs resume` go through the executor (run.start, run.fork, run.resume), so each
start and each refusal is one audit record; a gateway is never offered them."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import assert_one_line_error, run_gormes
from mcp_helpers import call_refused, gormes_mcp, tool_names

SCRIPT = {"agents": [{"replies": [
    {"tool_calls": [{"name": "fs.read", "arguments": {"path": "notes.txt"}}]},
    {"text": "read it"},
]}]}


def _setup(tmp_path: Path) -> tuple[Path, Path, str]:
    db, ws = tmp_path / "g.db", tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    return db, ws, f"scripted:{script}"


def _events(db: Path) -> list[dict]:
    listed = run_gormes(db, "events", "--json")
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


def _door_audits(db: Path) -> list[tuple[str, str, str, str]]:
    """(operation, caller, trust, outcome) of the audit records of run.* starts."""
    return [
        (e["data"]["operation"], e["data"]["caller"], e["data"]["trust"], e["data"]["outcome"])
        for e in _events(db)
        if e["type"] == "audit.operation" and e["data"]["operation"] in ("run.start", "run.fork", "run.resume")
    ]


def _checks_pass(db: Path) -> None:
    for args in (("audit", "verify"), ("projections", "rebuild", "--check")):
        done = run_gormes(db, *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)


def test_run_and_fork_each_leave_one_operator_audit_record(tmp_path: Path):
    db, ws, model = _setup(tmp_path)
    ran = run_gormes(db, "run", "agent", "--prompt", "x", "--model", model, "--workspace", str(ws), "--json")
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]
    assert _door_audits(db) == [("run.start", "cli", "operator", "ok")]

    tool_call = next(e for e in _events(db) if e["stream"] == f"run-{run_id}" and e["type"] == "run.tool_called")
    forked = run_gormes(db, "fork", run_id, "--at", str(tool_call["position"]), "--model", model,
                        "--workspace", str(ws), "--yes", "--json")
    assert forked.returncode == 0, forked.stderr
    assert json.loads(forked.stdout)["outcome"]["status"] == "completed"
    assert _door_audits(db) == [("run.start", "cli", "operator", "ok"), ("run.fork", "cli", "operator", "ok")]
    _checks_pass(db)


def test_refused_starts_are_one_line_and_one_audit_record_each(tmp_path: Path):
    db, ws, model = _setup(tmp_path)
    ran = run_gormes(db, "run", "agent", "--prompt", "x", "--model", model, "--workspace", str(ws), "--json")
    run_id = json.loads(ran.stdout)["run_id"]
    before = [e for e in _events(db) if e["type"] != "audit.operation"]

    refusals = [
        (("run", "ghost", "--prompt", "x"), "run.start"),
        (("fork", "no-such-run", "--at", "1"), "run.fork"),
        (("runs", "resume", "no-such-run"), "run.resume"),
        (("runs", "resume", run_id), "run.resume"),  # completed: nothing to resume
    ]
    for args, _ in refusals:
        done = run_gormes(db, *args)
        assert_one_line_error(done)
        assert done.returncode == 2, (args, done.stderr)
    audits = _door_audits(db)
    assert audits[0] == ("run.start", "cli", "operator", "ok")
    assert audits[1:] == [(operation, "cli", "operator", "invalid") for _, operation in refusals]
    # nothing but the refusals' audit records was written
    assert [e for e in _events(db) if e["type"] != "audit.operation"] == before
    _checks_pass(db)


def test_refused_evals_are_audited_as_the_forks_they_would_be(tmp_path: Path):
    """An attacker's finding: `gormes eval runs` refused an unknown run, or re-runs
    it was not told --yes for, in the CLI before any `run.fork` call, so neither
    refusal was audited, though `gormes fork`'s same refusals are."""
    db, ws, model = _setup(tmp_path)
    ran = run_gormes(db, "run", "agent", "--prompt", "x", "--model", model, "--workspace", str(ws), "--json")
    run_id = json.loads(ran.stdout)["run_id"]
    unknown = run_gormes(db, "eval", "runs", "no-such-run", "--model", model)
    assert unknown.returncode == 2 and "no run 'no-such-run'" in assert_one_line_error(unknown)
    unconfirmed = run_gormes(db, "eval", "runs", run_id, "--model", model, "--workspace", str(ws))
    assert unconfirmed.returncode == 2, unconfirmed.stderr
    refused = [(e["data"]["operation"], e["data"]["outcome"], e["data"]["error"].split(":")[0]) for e in _events(db)
               if e["type"] == "audit.operation" and e["data"]["operation"] == "run.fork"]
    assert refused == [("run.fork", "invalid", "EvalRefused"), ("run.fork", "invalid", "ForkUnconfirmed")]
    _checks_pass(db)


async def test_a_gateway_is_never_offered_the_run_door_and_is_refused(tmp_path: Path):
    db, _, model = _setup(tmp_path)
    async with gormes_mcp(db) as client:
        names = await tool_names(client)
        refused = {tool: await call_refused(client, tool, handler="agent", input={"prompt": "x"}, model=model)
                   for tool in ("run__start", "run__fork", "run__resume")}
    assert not names & {"run__start", "run__fork", "run__resume"}
    assert all(text.startswith("UnknownOperation: ") for text in refused.values()), refused
    audits = [e["data"] for e in _events(db) if e["type"] == "audit.operation"]
    assert [(a["operation"], a["trust"], a["allowed"], a["outcome"]) for a in audits] == [
        (tool, "gateway", False, "denied") for tool in ("run__start", "run__fork", "run__resume")]
    assert not [e for e in _events(db) if e["stream"].startswith("run-")]
    _checks_pass(db)


def test_a_resume_is_one_operator_audit_record_and_keeps_the_source_trust(tmp_path: Path):
    """Resuming as the operator is audited as run.resume, and the resumed run keeps
    its source's trust class and scope: the operator's door does not widen it."""
    import signal

    from test_runs_resume import start_run, write_script

    db, script = tmp_path / "g.db", tmp_path / "model.json"
    proc, old = start_run(db, write_script(script, 60_000))
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    write_script(script, 0)
    resumed = run_gormes(db, "runs", "resume", old)
    assert resumed.returncode == 0, resumed.stderr
    new = resumed.stdout.splitlines()[0].split()[1]
    assert _door_audits(db) == [("run.start", "cli", "operator", "ok"), ("run.resume", "cli", "operator", "ok")]
    started = {e["stream"]: e["data"] for e in _events(db) if e["type"] == "run.started"}
    source, resumed_run = started[f"run-{old}"], started[f"run-{new}"]
    assert resumed_run["trust"] == source["trust"]
    assert resumed_run.get("scope") == source.get("scope")
    _checks_pass(db)


def test_ops_call_cannot_start_a_run_around_the_foreground_commands(tmp_path: Path):
    """`gormes ops call run.start` has no RunManager to start on: refused in one
    line, audited as denied, and no run is started behind the operator's back."""
    db, _, model = _setup(tmp_path)
    for operation, value in (("run.start", {"handler": "agent", "model": model}),
                             ("run.fork", {"run_id": "r", "at": 1}), ("run.resume", {"run_id": "r"})):
        done = run_gormes(db, "ops", "call", operation, json.dumps(value))
        assert "run operations are off" in assert_one_line_error(done)
        assert done.returncode == 2
    assert [a[3] for a in _door_audits(db)] == ["denied"] * 3
    assert not [e for e in _events(db) if e["stream"].startswith("run-")]
    _checks_pass(db)
