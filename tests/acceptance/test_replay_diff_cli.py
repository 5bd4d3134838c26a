"""`gormes replay` names what differs at a divergence, for people and in --json, through
the real CLI against the recorded fixtures and a changed handler file."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import REPO, run_gormes

FIXTURES = REPO / "replay_fixtures"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
HANDLERS = str(FIXTURES / "handlers.py")

READS_ANOTHER_FILE = '''
from gormes.actors.runs.context import run_handler

@run_handler("fixture.cancel_child")
async def cancel_child(ctx, input):
    await ctx.log("starting")
    await ctx.now()
    await ctx.random()
    await ctx.progress({"step": 1, "of": 2})
    await ctx.tokens(input=12, output=3)
    child = await ctx.spawn("fixture.wait_then_agent", {"word": "never sent", "agent": {"prompt": "unused"}})
    await ctx.tool("fs.read", {"path": "notes.txt", "max_bytes": 64})
    return "changed"
'''

ANOTHER_PROMPT = '''
from gormes.actors.runs.agent import agent as builtin
from gormes.actors.runs.context import run_handler

@run_handler("agent")
async def agent(ctx, input):
    return await builtin(ctx, {**input, "prompt": input["prompt"] + " Be quick."})
'''


def replay_changed(tmp_path: Path, fixture: str, source: str, *more: str):
    changed = tmp_path / "changed.py"
    changed.write_text(source)
    run_id = MANIFEST[fixture]["replays"][0]["run_id"]
    return run_gormes(tmp_path / "never-made.db", "replay", run_id, "--file",
                      str(FIXTURES / MANIFEST[fixture]["file"]), "--import", HANDLERS, "--import", str(changed), *more)


def test_a_changed_tool_argument_is_named_in_text_and_json(tmp_path: Path) -> None:
    done = replay_changed(tmp_path, "cancelled_child", READS_ANOTHER_FILE)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("divergence at position"))
    assert lines[at + 1:] == [
        "  argument max_bytes: only in the code: 64",
        '  argument path: recorded "README.md", code asked "notes.txt"',
    ]

    done = replay_changed(tmp_path, "cancelled_child", READS_ANOTHER_FILE, "--json")
    assert done.returncode == 1, done.stderr
    diff = json.loads(done.stdout)["divergence"]["diff"]
    assert diff == {"kind": "tool", "note": None, "differences": [
        {"what": "argument", "path": "arguments.max_bytes", "asked": "64"},
        {"what": "argument", "path": "arguments.path", "recorded": '"README.md"', "asked": '"notes.txt"'},
    ]}


def test_a_changed_prompt_names_the_message_and_field_in_json(tmp_path: Path) -> None:
    done = replay_changed(tmp_path, "tool_error", ANOTHER_PROMPT, "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["exact"] is False and report["handler_version_changed"] is True
    diff = report["divergence"]["diff"]
    assert diff["kind"] == "llm"
    assert diff["differences"] == [{
        "what": "message", "path": "messages[0].content", "index": 0, "role": "user",
        "recorded": '"Read missing.txt, else notes.txt."',
        "asked": '"Read missing.txt, else notes.txt. Be quick."',
    }]
