"""A user's operation file (`@gormes.operation` and a run handler) through the real
CLI in subprocesses: `--import` on run, ops, replay, fork, runs resume, doctor, mcp;
the call recorded in the run and served from the log on replay; bad files one line."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from cli_helpers import create_database, assert_one_line_error, cli_env, gormes_command, run_gormes

TOOLS = '''
from pathlib import Path

import msgspec

import gormes

CALLS = Path({calls!r})


class WeatherIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    city: str


class WeatherOut(msgspec.Struct, kw_only=True):
    city: str
    celsius: float


@gormes.operation("weather.get", trust=["operator", "child-agent", "system"])
async def weather(ctx: gormes.OperationContext, input: WeatherIn) -> WeatherOut:
    """The temperature in a city, in degrees Celsius."""
    with CALLS.open("a") as calls:  # a side effect replay must never repeat
        calls.write(input.city + "\\n")
    return WeatherOut(city=input.city, celsius=float(len(input.city)))


@gormes.run_handler("forecast")
async def forecast(ctx: gormes.RunContext, input):
    reading = await ctx.tool("weather.get", {{"city": input[{key!r}]}})
    return {{"summary": f"{{reading['city']}}: {{reading['celsius']:g}} C"}}
'''


def tools_file(tmp_path: Path, name: str = "my_tools.py", key: str = "city") -> tuple[Path, Path]:
    calls = tmp_path / "calls.txt"
    path = tmp_path / name
    path.write_text(TOOLS.format(calls=str(calls), key=key))
    return path, calls


def forecast_run(db: Path, tools: Path) -> dict:
    ran = run_gormes(db, "run", "forecast", "--input", '{"city": "Oslo"}', "--import", str(tools), "--json")
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def test_ops_list_schema_and_call_see_the_imported_operation(tmp_path: Path):
    db = tmp_path / "gormes.db"
    tools, calls = tools_file(tmp_path)
    listed = run_gormes(db, "ops", "list", "--import", str(tools), "--json")
    assert listed.returncode == 0, listed.stderr
    (info,) = [op for op in json.loads(listed.stdout) if op["name"] == "weather.get"]
    assert info["trust"] == ["operator", "child-agent", "system"] and info["audit_kind"] == "weather.read"
    assert info["description"] == "The temperature in a city, in degrees Celsius."
    without = json.loads(run_gormes(db, "ops", "list", "--json").stdout)
    assert "weather.get" not in {op["name"] for op in without}

    for trust, offered in [("child-agent", True), ("gateway", False)]:
        schema = run_gormes(db, "ops", "schema", "--trust", trust, "--import", str(tools))
        tools_offered = {t["name"]: t for t in json.loads(schema.stdout)}
        assert ("weather.get" in tools_offered) is offered, trust
    child = {t["name"]: t for t in json.loads(
        run_gormes(db, "ops", "schema", "--trust", "child-agent", "--import", str(tools)).stdout)}
    assert child["weather.get"]["parameters"]["required"] == ["city"]

    called = run_gormes(db, "ops", "call", "weather.get", '{"city": "Rome"}', "--import", str(tools))
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout) == {"city": "Rome", "celsius": 4.0}
    assert calls.read_text() == "Rome\n"
    audit = run_gormes(db, "audit", "export", "--kind", "weather.read")
    assert audit.returncode == 0, audit.stderr
    rows = [json.loads(line) for line in audit.stdout.splitlines() if line.strip()]
    assert [(r["operation"], r["outcome"]) for r in rows] == [("weather.get", "ok")]


def test_a_run_records_the_call_and_replay_serves_it_from_the_log(tmp_path: Path):
    db = tmp_path / "gormes.db"
    tools, calls = tools_file(tmp_path)
    outcome = forecast_run(db, tools)
    assert outcome["status"] == "completed" and outcome["result"] == {"summary": "Oslo: 4 C"}
    assert calls.read_text() == "Oslo\n"

    exported = [json.loads(line) for line in run_gormes(db, "export", outcome["run_id"]).stdout.splitlines()]
    (called,) = [e["data"] for e in exported if e["type"] == "run.tool_called"]
    assert called["operation"] == "weather.get" and called["outcome"] == "ok"

    replayed = run_gormes(db, "replay", outcome["run_id"], "--import", str(tools), "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    report = json.loads(replayed.stdout)
    assert (report["exact"], report["divergence"]) == (True, None)
    assert calls.read_text() == "Oslo\n"  # served from the log: the operation did not run again

    # The same file, its handler now asking for another argument: the divergence names the call.
    changed_dir = tmp_path / "changed"
    changed_dir.mkdir()
    changed, _ = tools_file(changed_dir, key="town")
    changed.write_text(changed.read_text().replace("input['town']", '"Bergen"'))
    diverged = run_gormes(db, "replay", outcome["run_id"], "--import", str(changed), "--json")
    assert diverged.returncode == 1, diverged.stdout + diverged.stderr
    divergence = json.loads(diverged.stdout)["divergence"]
    assert divergence is not None and "weather.get" in json.dumps(divergence)
    assert "Oslo" in json.dumps(divergence["recorded"]) and "Bergen" in json.dumps(divergence["asked"])
    assert calls.read_text() == "Oslo\n"


def test_runs_resume_and_fork_take_the_import(tmp_path: Path):
    db = tmp_path / "gormes.db"
    tools, calls = tools_file(tmp_path)
    outcome = forecast_run(db, tools)
    exported = [json.loads(line) for line in run_gormes(db, "export", outcome["run_id"]).stdout.splitlines()]
    started = next(e for e in exported if e["type"] == "run.started")
    forked = run_gormes(db, "fork", outcome["run_id"], "--at", str(started["position"]),
                        "--import", str(tools), "--yes", "--json")
    assert forked.returncode == 0, forked.stdout + forked.stderr
    assert json.loads(forked.stdout)["outcome"]["result"] == {"summary": "Oslo: 4 C"}
    assert calls.read_text() == "Oslo\nOslo\n"  # the fork went live after the run's start

    without = run_gormes(db, "fork", outcome["run_id"], "--at", str(started["position"]), "--json")
    assert without.returncode != 0  # without the import the handler is unknown
    # A completed run cannot be resumed, but the import is loaded first and the
    # refusal is the run's, not an unknown option or handler.
    resumed = run_gormes(db, "runs", "resume", outcome["run_id"], "--import", str(tools))
    line = assert_one_line_error(resumed)
    assert "--import" not in line and "no run handler" not in line


def test_an_agent_run_on_the_scripted_model_is_offered_and_calls_the_operation(tmp_path: Path):
    db = tmp_path / "gormes.db"
    tools, calls = tools_file(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"tool_calls": [{"name": "weather.get", "arguments": {"city": "Lima"}}]},
        {"text": "It is 4 C in Lima."},
    ]))
    ran = run_gormes(db, "run", "agent", "--prompt", "weather in Lima?", "--model", f"scripted:{script}",
                     "--tools", "weather.get", "--import", str(tools), "--json")
    assert ran.returncode == 0, ran.stderr
    outcome = json.loads(ran.stdout)
    assert (outcome["status"], outcome["result"]) == ("completed", "It is 4 C in Lima.")
    assert calls.read_text() == "Lima\n"
    replayed = run_gormes(db, "replay", outcome["run_id"], "--import", str(tools))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.splitlines()[-1].startswith("exact")
    assert calls.read_text() == "Lima\n"


def test_the_doctor_checks_an_imported_operation(tmp_path: Path):
    db = tmp_path / "gormes.db"
    tools, _ = tools_file(tmp_path)
    forecast_run(db, tools)
    plain = json.loads(run_gormes(db, "doctor", "--offline", "--json").stdout)
    imported = json.loads(run_gormes(db, "doctor", "--offline", "--json", "--import", str(tools)).stdout)

    def specs_line(report: dict) -> str:
        return next(c["message"] for c in report["checks"] if c["name"] == "operations.specs")

    count = int(specs_line(plain).split()[0])
    assert specs_line(imported).startswith(f"{count + 1} operations (1 declared: weather.get)")


@pytest.mark.parametrize("source, says", [
    ("CLASH", "clashes with the built-in operation 'fs.read'"),
    ("LONG", "no provider can carry it"),
    ("TRUST", "unknown trust class root"),
])
def test_a_bad_operation_file_is_one_line_and_exit_2(tmp_path: Path, source: str, says: str):
    body = {
        "CLASH": '@gormes.operation("fs__read")',
        "LONG": f'@gormes.operation("weather.{"x" * 70}")',
        "TRUST": '@gormes.operation("weather.get", trust=["operator", "root"])',
    }[source]
    bad = tmp_path / "bad_tools.py"
    bad.write_text(
        "import msgspec\nimport gormes\n\nclass In(msgspec.Struct):\n    city: str\n\n"
        f"{body}\nasync def op(ctx: gormes.OperationContext, input: In) -> dict:\n    \"\"\"Doc.\"\"\"\n    return {{}}\n"
    )
    db = tmp_path / "gormes.db"
    for args in (("ops", "list"), ("run", "forecast", "--input", "{}"), ("doctor", "--offline")):
        done = run_gormes(db, *args, "--import", str(bad))
        line = assert_one_line_error(done)
        assert says in line and done.returncode == 2, (args, line)
    assert not db.exists()  # refused before the database was touched


def test_an_operation_declared_in_two_files_names_both(tmp_path: Path):
    one, _ = tools_file(tmp_path, "one.py")
    two, _ = tools_file(tmp_path, "two.py")
    done = run_gormes(tmp_path / "gormes.db", "ops", "list", "--import", str(one), "--import", str(two))
    line = assert_one_line_error(done)
    assert "'weather.get' is declared twice" in line and str(one) in line and str(two) in line
    again = run_gormes(tmp_path / "gormes.db", "ops", "list", "--import", str(one), "--import", str(one))
    assert again.returncode == 0, again.stderr  # the same file twice is one declaration


def test_a_worker_with_the_import_runs_an_agent_job_that_calls_the_operation(tmp_path: Path):
    db = tmp_path / "gormes.db"
    tools, calls = tools_file(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"tool_calls": [{"name": "weather.get", "arguments": {"city": "Quito"}}]},
        {"text": "done"},
    ]))
    create_database(db)
    worker = subprocess.Popen(gormes_command(db, "worker", "--import", str(tools), "--shutdown-grace", "500"),
                              env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        data = json.dumps({"prompt": "weather in Quito?", "model": f"scripted:{script}"})
        job_id = run_gormes(db, "jobs", "submit", "agent", "--data", data).stdout.strip()
        waited = run_gormes(db, "jobs", "wait", job_id, "--timeout", "60")
        job = json.loads(run_gormes(db, "jobs", "get", job_id, "--json").stdout)
        assert waited.stdout.strip() == "completed", job
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    assert calls.read_text() == "Quito\n"
    exported = [json.loads(line) for line in run_gormes(db, "export", job["result"]["run_id"]).stdout.splitlines()]
    assert [e["data"]["operation"] for e in exported if e["type"] == "run.tool_called"] == ["weather.get"]
