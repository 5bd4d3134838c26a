"""A gateway's deeply nested arguments over MCP.

The executor refuses JSON nested deeper than 64 levels (`MAX_NESTING`), but it
counted the levels only of input given as text (the CLI's `ops call`, a model's
tool arguments). The MCP SDK hands gormes the arguments already parsed, as a
dict, and a dict went straight to msgspec: a gateway's `job.submit` with data
nested 100 deep was recorded. Nothing gormes writes nests that deep, and
`gormes import` refuses such a line, so from then on the operator's `gormes
export` of the log could not be imported again ("line N is nested deeper than 64
levels; refused unread"): a remote client could spoil every backup made by
export. Parsed input is now measured the same way, by a flat walk.
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import run_gormes
from mcp_helpers import call_refused, gormes_mcp

from gormes.events.json_nesting import MAX_INPUT_NESTING, MAX_NESTING
from gormes.ops.executor import decode_input
from gormes.ops.spec import InvalidOperationInput
from gormes.tools.builtin import default_registry

import pytest


def nested(levels: int) -> object:
    value: object = []
    for _ in range(levels - 1):
        value = [value]
    return value


async def test_a_gateways_deep_job_data_over_mcp_is_refused_and_the_export_still_imports(tmp_path: Path):
    db = tmp_path / "g.db"
    async with gormes_mcp(db) as client:
        line = await call_refused(client, "job__submit", name="echo", data=nested(100))
    assert "nested deeper than" in line, line

    events = [json.loads(x) for x in run_gormes(db, "events", "--json").stdout.splitlines()]
    assert not [e for e in events if e["type"] == "job.submitted"]
    [audit] = [e["data"] for e in events if e["type"] == "audit.operation"]
    assert (audit["operation"], audit["trust"], audit["outcome"]) == ("job.submit", "gateway", "invalid")

    exported = tmp_path / "log.jsonl"
    assert run_gormes(db, "export", "--out", str(exported)).returncode == 0
    done = run_gormes(tmp_path / "copy.db", "import", str(exported))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("levels, refused", [
    (MAX_INPUT_NESTING, False), (MAX_INPUT_NESTING + 1, True), (MAX_NESTING, True), (100_000, True),
])
def test_parsed_input_is_measured_like_text(levels: int, refused: bool):
    spec = default_registry().get("job.submit")
    raw = {"name": "echo", "data": nested(levels - 1)}  # the object itself is one level
    if refused:
        with pytest.raises(InvalidOperationInput, match="nested deeper than"):
            decode_input(spec, raw)
    else:
        decode_input(spec, raw)
        text = json.dumps(raw)
        decode_input(spec, text)  # the same input as text is accepted alike
