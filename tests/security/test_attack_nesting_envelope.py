"""A gateway's value nested as deep as the executor took it, and the export of the log.

`gormes import` refuses a line nested deeper than 64 levels (`MAX_NESTING`), and
the executor refused input deeper than that (test_attack_mcp_nesting.py). But a line nests a caller's value below the levels
gormes puts around it: a gateway's job data 63 deep (its input 64) is 65 deep in
its `job.submitted` line, 66 in a `merge` job's, and a run's tool call reading it
back (`job.list`, `run.timeline`) records it deeper still. So one accepted `job.submit` left a log
whose every export was refused by `gormes import` ("line 1 is nested deeper than
64 levels; refused unread"). An operation's input now leaves room for that
envelope (`MAX_INPUT_NESTING`, decision 0074).
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from cli_helpers import run_gormes
from mcp_helpers import call_ok, gormes_mcp

from gormes.events.json_nesting import MAX_LINE_NESTING, MAX_NESTING, nesting_depth_over
from gormes.events.runs import InboxItem, RunInboxRead, RunToolCalled, run_stream
from gormes.events.sqlite import SQLiteEventStore
from gormes.ops.executor import decode_input
from gormes.ops.spec import InvalidOperationInput
from gormes.tools.builtin import default_registry

MERGE = {"debounce_key": "deep", "debounce_ms": 3_600_000, "debounce_mode": "merge"}


def nested(levels: int) -> object:
    value: object = []
    for _ in range(levels - 1):
        value = [value]
    return value


def deepest_data() -> int:
    """How deep a job's data may nest, as the executor takes `job.submit`'s input."""
    spec = default_registry().get("job.submit")
    levels = MAX_NESTING
    while True:
        try:
            decode_input(spec, {"name": "echo", "data": nested(levels)})
        except InvalidOperationInput:
            levels -= 1
        else:
            return levels


def export_imports(db: Path, tmp_path: Path) -> None:
    exported = tmp_path / "log.jsonl"
    done = run_gormes(db, "export", "--out", str(exported))
    assert done.returncode == 0, done.stderr
    imported = run_gormes(tmp_path / "copy.db", "import", "--live-work", str(exported))  # a backup restored
    assert imported.returncode == 0, imported.stderr


async def test_the_deepest_data_a_gateway_may_submit_still_exports_and_imports(db_path: Path, tmp_path: Path):
    deep = nested(deepest_data())
    async with gormes_mcp(db_path) as client:
        first = await call_ok(client, "job__submit", name="echo", data=deep, options=MERGE)
        joined = await call_ok(client, "job__submit", name="echo", data=deep, options=MERGE)
    assert joined["id"] == first["id"] and joined["coalesced"], "job.submitted and job.coalesced both hold it"
    export_imports(db_path, tmp_path)


async def test_a_runs_record_of_reading_it_back_still_exports_and_imports(db_path: Path, tmp_path: Path):
    """The deepest envelopes a run records around such a value: the `job.list` result
    of a merged job holding it, an inbox message carrying it (`run.send`'s payload
    is as deep as a job's data), and the `run.timeline` result of a run that read
    that message."""
    deep = nested(deepest_data())
    listed = {"jobs": [{"id": "j", "data": [deep, deep]}]}
    message = InboxItem(id="m", sender="mcp:x", payload=deep, sent_at=0)
    timeline = {"run_id": "r1", "timeline": [{"type": "run.inbox_read", "messages": [msgspec.to_builtins(message)]}]}
    async with SQLiteEventStore.open(db_path) as store:
        await store.append(run_stream("r1"), [
            RunToolCalled(seq=1, operation="job.list", arguments="{}", args_hash="0" * 64, outcome="ok", result=listed),
            RunInboxRead(seq=2, messages=(message,)),
            RunToolCalled(seq=3, operation="run.timeline", arguments="{}", args_hash="0" * 64, outcome="ok",
                          result=timeline),
        ])
    export_imports(db_path, tmp_path)


def deepest_line(path: Path) -> int:
    """How deep the deepest line of a JSONL file nests."""
    lines = path.read_bytes().splitlines()
    depth = 1
    while any(nesting_depth_over(line, depth) for line in lines):
        depth += 1
    return depth


async def test_a_log_an_older_gormes_wrote_from_input_it_took_exports_and_imports(db_path: Path, tmp_path: Path):
    """Before decision 0074 the executor took input as deep as `MAX_NESTING`: such a
    value (a message's payload, `run.send`'s input one level above it) recorded in
    a run's `run.timeline` result is a line 70 deep, whose owner's export `gormes
    import` refused at 64. Lines are read up to `MAX_LINE_NESTING` (72); deeper is
    still refused unread, with one line."""
    deep = nested(MAX_NESTING - 1)
    message = InboxItem(id="m", sender="mcp:x", payload=deep, sent_at=0)
    timeline = {"run_id": "r1", "timeline": [{"type": "run.inbox_read", "messages": [msgspec.to_builtins(message)]}]}
    async with SQLiteEventStore.open(db_path) as store:  # as the older gormes recorded them
        await store.append(run_stream("r1"), [
            RunInboxRead(seq=1, messages=(message,)),
            RunToolCalled(seq=2, operation="run.timeline", arguments="{}", args_hash="0" * 64, outcome="ok",
                          result=timeline),
        ])
    exported = tmp_path / "log.jsonl"
    done = run_gormes(db_path, "export", "--out", str(exported))
    assert done.returncode == 0, done.stderr
    assert deepest_line(exported) == 70 > MAX_NESTING
    imported = run_gormes(tmp_path / "copy.db", "import", "--live-work", str(exported))
    assert imported.returncode == 0, imported.stderr
    async with SQLiteEventStore.open(tmp_path / "copy.db") as copy:
        [_, called] = await copy.read_stream(run_stream("r1"))
    assert called.event.result == timeline

    # deeper than any gormes wrote: refused unread, nothing imported
    line = json.loads(exported.read_bytes().splitlines()[-1])
    line["data"]["result"]["timeline"][0]["messages"][0]["payload"] = nested(MAX_NESTING + 10)
    too_deep = tmp_path / "too-deep.jsonl"
    too_deep.write_text(json.dumps(line) + "\n")
    refused = run_gormes(tmp_path / "other.db", "import", "--live-work", str(too_deep))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"gormes: error: line 1 is nested deeper than {MAX_LINE_NESTING} levels; refused unread"]
