"""`gormes replay`, `gormes export RUN`, `gormes fork` through the real CLI in
subprocesses, against real database files and the recorded fixtures."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import REPO, assert_one_line_error, digest, json_lines, run_gormes

FIXTURES = REPO / "replay_fixtures"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
HANDLERS = str(FIXTURES / "handlers.py")
BOUNDED = str(FIXTURES / "bounded.py")  # the handler of the fixture recorded after decision 0080
CHANGED_HANDLER = '''
from gormes.actors.runs.context import run_handler

@run_handler("fixture.cancel_child")
async def cancel_child(ctx, input):
    await ctx.log("starting")
    await ctx.now()
    await ctx.random()
    await ctx.progress({"step": 1, "of": 2})
    await ctx.tokens(input=12, output=3)
    child = await ctx.spawn("fixture.wait_then_agent", {"word": "never sent", "agent": {"prompt": "unused"}})
    await ctx.tool("fs.read", {"path": "notes.txt"})
    return "changed"
'''


def fixture_file(name: str) -> str:
    return str(FIXTURES / MANIFEST[name]["file"])


def root(name: str) -> dict:
    return MANIFEST[name]["replays"][0]


def imported(tmp_path: Path, *names: str) -> Path:
    db = tmp_path / "runs.db"
    for name in names:
        done = run_gormes(db, "import", fixture_file(name))
        assert done.returncode == 0, done.stderr
    return db


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_replay_file_reproduces_each_fixture_without_a_database(name: str, tmp_path: Path) -> None:
    db = tmp_path / "never-made.db"
    for expected in MANIFEST[name]["replays"]:
        done = run_gormes(db, "replay", expected["run_id"], "--file", fixture_file(name), "--import", HANDLERS,
                          "--import", BOUNDED)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines()[-1] == f"exact: {expected['events']} events reproduced"
    assert not db.exists()


def test_replay_from_the_database_with_json_and_no_children(tmp_path: Path) -> None:
    db = imported(tmp_path, "subagents")
    expected = root("subagents")
    full = run_gormes(db, "replay", expected["run_id"], "--json")
    assert full.returncode == 0, full.stderr
    report = json.loads(full.stdout)
    assert (report["exact"], report["events"], report["divergence"]) == (True, expected["events"], None)
    assert report["handler_version_changed"] is False
    assert [c["status"] for c in report["children"]] == ["completed"]
    assert [c["status"] for c in report["children"][0]["children"]] == ["completed"]

    alone = json.loads(run_gormes(db, "replay", expected["run_id"], "--no-children", "--json").stdout)
    own = sum(1 for line in json_lines(Path(fixture_file("subagents")).read_text())
              if line["stream"] == f"run-{expected['run_id']}")
    assert (alone["exact"], alone["events"]) == (True, own)
    assert [c["status"] for c in alone["children"]] == ["not replayed"]


def logged(db: Path, run_id: str) -> list[dict]:
    """The run's events as this database holds them (import renumbers positions)."""
    return json_lines(run_gormes(db, "export", run_id).stdout)


def test_until_prints_the_state_and_exits_zero(tmp_path: Path) -> None:
    db = imported(tmp_path, "tool_error")
    lines = logged(db, root("tool_error")["run_id"])
    first_tool = next(line for line in lines if line["type"] == "run.tool_called")
    done = run_gormes(db, "replay", root("tool_error")["run_id"], "--until", str(first_tool["position"]))
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0].startswith(f"run {root('tool_error')['run_id']} at position {first_tool['position']} "
                             f"(seq {first_tool['data']['seq']}): 1 model turns")
    assert out[-1].startswith(f"exact up to position {first_tool['position']}: ")


def test_a_changed_handler_names_the_divergence_and_exits_one(tmp_path: Path) -> None:
    changed = tmp_path / "changed.py"
    changed.write_text(CHANGED_HANDLER)
    lines = json_lines(Path(fixture_file("cancelled_child")).read_text())
    call = next(line for line in lines if line["type"] == "run.tool_called")
    done = run_gormes(tmp_path / "x.db", "replay", "--file", fixture_file("cancelled_child"),
                      "--import", HANDLERS, "--import", str(changed))
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[-2:] == [
        f"divergence at position {call['position']} (seq {call['data']['seq']}): "
        'recorded tool fs.read {"path":"README.md"}, code asked tool fs.read {"path":"notes.txt"}',
        '  argument path: recorded "README.md", code asked "notes.txt"',
    ]
    assert "warning: handler 'fixture.cancel_child' changed" in done.stdout


def test_export_run_with_children_then_replay_the_file(tmp_path: Path) -> None:
    db = imported(tmp_path, "subagents", "tool_error")
    run_id = root("subagents")["run_id"]
    out = tmp_path / "run.jsonl"
    done = run_gormes(db, "export", run_id, "--children", "--out", str(out))
    assert done.returncode == 0, done.stderr
    lines = json_lines(out.read_text())
    assert {line["stream"] for line in lines} == {f"run-subagents-{i}" for i in (1, 2, 3)}
    assert json_lines(run_gormes(db, "export", run_id).stdout) == [
        line for line in lines if line["stream"] == f"run-{run_id}"
    ]
    replayed = run_gormes(tmp_path / "none.db", "replay", "--file", str(out))
    assert replayed.stdout == f"exact: {root('subagents')['events']} events reproduced\n", replayed.stderr


def test_fork_records_forked_from_and_continues_live(tmp_path: Path) -> None:
    db = imported(tmp_path, "tool_error")
    run_id = root("tool_error")["run_id"]
    lines = logged(db, run_id)
    failed_tool = next(line for line in lines if line["type"] == "run.tool_called")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"agents": [{"replies": [
        {"tool_calls": [{"name": "fs.read", "arguments": {"path": "missing.txt"}}]},
        {"text": "gave up after the missing file"},
    ]}]}))
    done = run_gormes(db, "fork", run_id, "--at", str(failed_tool["position"]), "--model", f"scripted:{script}",
                      "--set", "max_iterations=4", "--workspace", str(FIXTURES / "workspace"), "--json")
    assert done.returncode == 0, done.stderr
    forked = json.loads(done.stdout)
    assert forked["forked_from"] == {"run_id": run_id, "position": failed_tool["position"]}
    assert forked["outcome"]["result"] == "gave up after the missing file"
    stream = json_lines(run_gormes(db, "export", forked["run_id"]).stdout)
    assert stream[0]["data"]["forked_from"] == forked["forked_from"]
    assert stream[0]["data"]["input"]["max_iterations"] == 4
    replayed = run_gormes(db, "replay", forked["run_id"])
    assert replayed.returncode == 0 and replayed.stdout.startswith("exact: "), replayed.stdout + replayed.stderr


# -- bad input: one clear line, a non-zero exit, nothing recorded lost -------------------------


def test_an_unknown_run_id(tmp_path: Path) -> None:
    db = imported(tmp_path, "tool_error")
    before = [e for e in json_lines(run_gormes(db, "events", "--json").stdout) if e["type"] != "audit.operation"]
    line = assert_one_line_error(run_gormes(db, "replay", "no-such-run"))
    assert "no run 'no-such-run'" in line
    assert "no run 'no-such-run'" in assert_one_line_error(run_gormes(db, "fork", "no-such-run", "--at", "1"))
    after = json_lines(run_gormes(db, "events", "--json").stdout)
    # nothing is written but the refused fork's audit record (run.fork, invalid)
    assert [e for e in after if e["type"] != "audit.operation"] == before
    assert [(e["data"]["operation"], e["data"]["outcome"]) for e in after if e["type"] == "audit.operation"
            and e["data"]["operation"] == "run.fork"] == [("run.fork", "invalid")]


def corrupt(tmp_path: Path, name: str, edit) -> Path:
    text = Path(fixture_file(name)).read_text()
    path = tmp_path / f"bad-{name}.jsonl"
    path.write_text(edit(text))
    return path


def edit_lines(kind: str, change):
    def edit(text: str) -> str:
        out = []
        for line in text.splitlines():
            data = json.loads(line)
            if data["type"] == kind:
                change(data)
            out.append(json.dumps(data))
        return "\n".join(out) + "\n"
    return edit


@pytest.mark.parametrize(("edit", "message"), [
    (lambda text: text[: len(text) // 2], "not valid JSON (is the file truncated or corrupt?)"),
    (lambda text: text.replace('"position"', '"pos', 1), "not valid JSON"),
    (edit_lines("run.tool_called", lambda d: d.update(type="run.teleported")), "unknown to this gormes"),
    (edit_lines("run.started", lambda d: d.update(schema_version=9)), "newer than this gormes knows"),
    (edit_lines("run.llm_turn", lambda d: d["data"]["reply"].update(content=7)),
     "invalid data for 'run.llm_turn'"),
])
def test_a_bad_file_is_one_clear_line(tmp_path: Path, edit, message: str) -> None:
    path = corrupt(tmp_path, "tool_error", edit)
    before = digest(path)
    line = assert_one_line_error(run_gormes(tmp_path / "x.db", "replay", "--file", str(path)))
    assert message in line, line
    assert digest(path) == before


def test_a_run_from_an_incompatible_version_in_the_database(tmp_path: Path) -> None:
    db = imported(tmp_path, "tool_error")
    run_id = root("tool_error")["run_id"]
    conn = sqlite3.connect(db)
    conn.execute("UPDATE events SET type_version = 9 WHERE type = 'run.llm_turn'")
    conn.commit()
    conn.close()
    before = digest(db)
    line = assert_one_line_error(run_gormes(db, "replay", run_id))
    assert "recorded by an incompatible gormes" in line and "'run.llm_turn'" in line
    assert digest(db) == before
