"""Bad input is refused up front (decision 0090): one `gormes: error:` line, exit 2,
nothing recorded; and a user's operation that raises is one line too (exit 1: the
call failed), audited as an error."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import assert_one_line_error, rows, run_gormes

BOOM = '''
import msgspec
import gormes


class In(msgspec.Struct):
    x: int


def deeper(x):
    raise RuntimeError(f"kaboom {x}")


@gormes.operation("my.boom")
async def boom(ctx, input: In) -> dict:
    """Fails."""
    deeper(input.x)
'''


def test_a_user_operation_that_raises_is_one_line_naming_it_and_audited_as_an_error(tmp_path: Path):
    db = tmp_path / "g.db"
    module = tmp_path / "badop.py"
    module.write_text(BOOM)
    called = run_gormes(db, "ops", "call", "my.boom", '{"x": 1}', "--import", str(module))
    line = assert_one_line_error(called)
    assert called.returncode == 1
    assert line == f"gormes: error: operation my.boom failed: RuntimeError: kaboom 1 (raised at {module}:11)"
    [(outcome, error)] = rows(db, "SELECT json_extract(data, '$.outcome'), json_extract(data, '$.error')"
                                  " FROM events WHERE type = 'audit.operation'")
    assert (outcome, error) == ("error", "RuntimeError: kaboom 1")


FAST = [{"tool_calls": [{"name": "time.now", "arguments": {}}]}, {"text": "fast done"}]


def recorded_run(db: Path, tmp_path: Path) -> str:
    script = tmp_path / "fast.json"
    script.write_text(json.dumps(FAST))
    done = run_gormes(db, "run", "agent", "--prompt", "hi", "--model", f"scripted:{script}",
                      "--workspace", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["run_id"]


def run_count(db: Path) -> int:
    [(count,)] = rows(db, "SELECT count(*) FROM events WHERE type = 'run.started'")
    return count


def test_replay_until_outside_the_run_is_refused_with_its_range(tmp_path: Path):
    db = tmp_path / "g.db"
    recorded_run(db, tmp_path)
    run_id = recorded_run(db, tmp_path)  # the second run starts well after position 1
    [(first, last)] = rows(db, f"SELECT min(position), max(position) FROM events WHERE stream = 'run-{run_id}'")
    assert first > 5
    for until in ("5", str(last + 1), "99999"):
        refused = run_gormes(db, "replay", run_id, "--until", until)
        line = assert_one_line_error(refused)
        assert refused.returncode == 2
        assert line == (f"gormes: error: --until {until} is not in run {run_id} "
                        f"(its events are at positions {first}..{last})")
    inside = run_gormes(db, "replay", run_id, "--until", str(first))
    assert inside.returncode == 0, inside.stderr
    assert f"up to position {first}:" in inside.stdout


def test_fork_and_eval_refuse_an_unknown_set_key_and_a_bad_model_before_asking_or_recording(tmp_path: Path):
    db = tmp_path / "g.db"
    run_id = recorded_run(db, tmp_path)
    [(first,)] = rows(db, f"SELECT min(position) FROM events WHERE stream = 'run-{run_id}'")
    before = run_count(db)
    unknown = "Object contains unknown field `tempreature`"
    # without --yes the fork of a run offered every tool asks for --yes: the bad input is said first
    for args, said in (
        (["fork", run_id, "--at", str(first), "--set", "tempreature=0.2", "--yes"], unknown),
        (["fork", run_id, "--at", str(first), "--set", "tempreature=0.2"], unknown),
        (["fork", run_id, "--at", str(first), "--model", "claude:x"], "unknown model provider 'claude:x'"),
        (["eval", "runs", run_id, "--set", "tempreature=0.2", "--yes"], unknown),
        (["eval", "runs", run_id, "--set", "tempreature=0.2"], unknown),
        (["eval", "runs", run_id, "--model", "claude:x"], "unknown model provider 'claude:x'"),
    ):
        refused = run_gormes(db, *args)
        assert said in assert_one_line_error(refused), args
        assert refused.returncode == 2, args
    assert run_count(db) == before
    fine = run_gormes(db, "fork", run_id, "--at", str(first), "--set", "prompt=bye", "--yes")
    assert fine.returncode == 0, fine.stderr
    assert run_count(db) == before + 1


LISTING = [{"tool_calls": [{"name": "fs.list", "arguments": {"path": "."}}]}, {"text": "done listing"}]


def test_a_misspelled_tool_is_refused_before_the_run_is_recorded(tmp_path: Path):
    db = tmp_path / "g.db"
    script = tmp_path / "s1.json"
    script.write_text(json.dumps(LISTING))
    base = ["run", "agent", "--prompt", "hi", "--model", f"scripted:{script}", "--workspace", str(tmp_path)]
    refused = run_gormes(db, *base, "--tools", "fs.lst")
    assert assert_one_line_error(refused) == "gormes: error: tools: unknown tool 'fs.lst' (did you mean fs.list?)"
    assert refused.returncode == 2
    nowhere = run_gormes(db, *base, "--tools", "fs.list,zzqqy")
    assert "unknown tool 'zzqqy' (`gormes ops list` lists them)" in assert_one_line_error(nowhere)
    assert not db.exists() or run_count(db) == 0
    listed = run_gormes(db, *base, "--tools", "fs.list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[-1] == "done listing"
    assert run_count(db) == 1
    # the gateways' door: run.submit says the name is unknown (not that it is denied)
    via_op = run_gormes(db, "ops", "call", "run.submit",
                        json.dumps({"prompt": "hi", "model": f"scripted:{script}", "tools": ["fs.lst"]}))
    assert "unknown tool 'fs.lst'" in assert_one_line_error(via_op)
    [(jobs,)] = rows(db, "SELECT count(*) FROM events WHERE type = 'job.submitted'")
    assert jobs == 0


def test_an_agent_job_that_can_never_run_is_refused_at_submission(tmp_path: Path):
    db = tmp_path / "g.db"
    script = tmp_path / "s1.json"
    script.write_text(json.dumps(LISTING))
    model = f"scripted:{script}"
    cases = (
        ({"prompt": "list"}, "agent job data: run handler 'agent' needs a model"),
        ({"handler": "nosuch", "input": {}, "model": model}, "agent job data: no run handler named 'nosuch'"),
        ({"prompt": "list", "model": "claude:x"}, "agent job data: unknown model provider 'claude:x'"),
        ({"prompt": "list", "model": model, "tools": ["fs.lst"]},
         "agent job data: tools: unknown tool 'fs.lst' (did you mean fs.list?)"),
    )
    for data, said in cases:
        refused = run_gormes(db, "jobs", "submit", "agent", "--data", json.dumps(data))
        assert said in assert_one_line_error(refused), data
        assert refused.returncode == 2
        # the job.submit operation (what a gateway or the MCP server calls) refuses the same
        via_op = run_gormes(db, "ops", "call", "job.submit", json.dumps({"name": "agent", "data": data}))
        assert said in assert_one_line_error(via_op), data
        assert via_op.returncode == 2
        # a schedule's fires go straight into the queue: its data is checked when it is added
        scheduled = run_gormes(db, "cron", "add", "nightly", "--schedule", "@daily", "--job", "agent",
                               "--data", json.dumps(data))
        assert said in assert_one_line_error(scheduled), data
    [(jobs,)] = rows(db, "SELECT count(*) FROM events WHERE type = 'job.submitted'")
    assert jobs == 0
    assert run_gormes(db, "cron", "list", "--json").stdout.strip() == "[]"
    fine = run_gormes(db, "jobs", "submit", "agent", "--data",
                      json.dumps({"prompt": "list", "model": model, "tools": ["fs.list", "mcp.files.read"]}))
    assert fine.returncode == 0, fine.stderr  # an MCP server's tool is the worker's to know
    assert rows(db, "SELECT count(*) FROM events WHERE type = 'job.submitted'") == [(1,)]
    # a handler the worker imports is named at submission by importing it there too
    handler = tmp_path / "trip.py"
    handler.write_text("import gormes\n\n@gormes.run_handler('trip')\nasync def trip(ctx, input):\n"
                       "    return input\n")
    trip = json.dumps({"handler": "trip", "input": {"km": 1}})
    assert "no run handler named 'trip'" in assert_one_line_error(
        run_gormes(db, "jobs", "submit", "agent", "--data", trip))
    imported = run_gormes(db, "jobs", "submit", "agent", "--data", trip, "--import", str(handler))
    assert imported.returncode == 0, imported.stderr
