"""Frames the MCP SDK cannot read, sent to `gormes mcp` (decision 0073).

The SDK's stdio transport dropped a line it could not parse without a word
(modelcontextprotocol/python-sdk#2751): a `tools/call` whose arguments nest 300
deep (past pydantic's parser, about 200 levels) was never answered, and a client
waiting on its id waited for ever, while the next request was answered. Every
such frame now gets the JSON-RPC 2.0 error for it, with the request's id when its
top level has one, and the session goes on; a notification or a response still
gets nothing, as the spec says.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp.shared.exceptions import MCPError
from cli_helpers import run_gormes
from mcp_helpers import RawMCP, call_ok, gormes_mcp, raw_gormes_mcp
from mcp_types import INVALID_REQUEST, PARSE_ERROR, jsonrpc_message_adapter

from gormes.events.json_nesting import MAX_NESTING, top_level
from gormes.mcp_frames import judge


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def deep_call(request_id: object, levels: int, *, id_last: bool = False) -> str:
    """A `tools/call` of `time__now` whose argument `a` nests `levels` deep."""
    head = '{"jsonrpc":"2.0",' + ("" if id_last else f'"id":{json.dumps(request_id)},')
    tail = "" if not id_last else f',"id":{json.dumps(request_id)}'
    return head + '"method":"tools/call","params":{"name":"time__now","arguments":{"a":' + deep(levels) + "}}" + tail + "}"


# (what, the line, the error code, the id the reply must carry)
ANSWERED: list[tuple[str, str, int, object]] = [
    ("not JSON", "hello {", PARSE_ERROR, None),
    ("a request cut short", '{"jsonrpc":"2.0","id":5,"method":"ping"', PARSE_ERROR, None),
    ("a blank line", "", PARSE_ERROR, None),
    ("300 deep, id first", deep_call(7, 300), INVALID_REQUEST, 7),
    ("300 deep, string id after the deep part", deep_call("late", 300, id_last=True), INVALID_REQUEST, "late"),
    ("100,000 deep", deep_call(8, 100_000), INVALID_REQUEST, 8),
    ("deep and unclosed", '{"jsonrpc":"2.0","id":9,"params":' + "[" * 300, INVALID_REQUEST, None),
    ("no jsonrpc member", '{"id":3,"method":"ping"}', INVALID_REQUEST, 3),
    ("jsonrpc 1.0", '{"jsonrpc":"1.0","id":"s","method":"ping"}', INVALID_REQUEST, "s"),
    ("a method that is not a string", '{"jsonrpc":"2.0","id":4,"method":5}', INVALID_REQUEST, 4),
    ("a batch", '[{"jsonrpc":"2.0","id":10,"method":"ping"}]', INVALID_REQUEST, None),
    ("a number", "42", INVALID_REQUEST, None),
    ("an id that is no request id", '{"id":true,"method":"ping"}', INVALID_REQUEST, None),
]


async def ping(raw: RawMCP, request_id: int) -> None:
    """The session still answers: a ping's reply is the next line."""
    await raw.request(request_id, "ping")
    assert await raw.reply() == {"jsonrpc": "2.0", "id": request_id, "result": {}}


async def test_every_unreadable_frame_is_answered_and_the_session_goes_on(tmp_path: Path):
    async with raw_gormes_mcp(tmp_path / "g.db", tmp_path / "stderr") as raw:
        for n, (what, line, code, request_id) in enumerate(ANSWERED):
            await raw.send(line)
            reply = await raw.reply()
            assert (reply["id"], reply["error"]["code"]) == (request_id, code), (what, reply)
            if "deep" in what:
                assert f"nested deeper than {MAX_NESTING} levels" in reply["error"]["message"], reply
            await ping(raw, 1000 + n)


async def test_a_notification_or_a_response_gets_no_reply(tmp_path: Path):
    # A notification has no id to answer; a response's id is one of the client's
    # own requests', which an error would answer. The ping's reply comes next.
    frames = [
        '{"jsonrpc":"2.0","method":"notifications/x","params":{"a":' + deep(300) + "}}",
        '{"method":"notifications/x"}',
        '{"jsonrpc":"2.0","id":"r","result":5}',
        '{"jsonrpc":"2.0","id":"r","error":{"code":"x"},"params":' + deep(300) + "}",
    ]
    async with raw_gormes_mcp(tmp_path / "g.db", tmp_path / "stderr") as raw:
        for n, frame in enumerate(frames):
            await raw.send(frame)
            await ping(raw, n)
    assert (tmp_path / "stderr").read_text().count("no reply") == len(frames)


# Ids JSON-RPC 2.0 allows (a number, null) or not (true, an object) that MCP's
# RequestId (a string or an integer, never null) does not: the SDK read each such
# request as a notification (pydantic ignores the extra member) and nothing replied.
NO_REQUEST_IDS = ["true", "1.5", "null", "1.0", "-0.0", "1e3", '{"n":1}', "[2]"]


@pytest.mark.parametrize("request_id", NO_REQUEST_IDS)
async def test_a_request_whose_id_is_no_request_id_is_refused_not_taken_for_a_notification(
    tmp_path: Path, request_id: str,
):
    db = tmp_path / "g.db"
    async with raw_gormes_mcp(db, tmp_path / "stderr") as raw:
        for n, method in enumerate(("tools/list", "ping")):
            await raw.send('{"jsonrpc":"2.0","id":' + request_id + ',"method":"' + method + '"}')
            reply = await raw.reply()
            assert reply["id"] is None and reply["error"]["code"] == INVALID_REQUEST, reply
            assert "id" in reply["error"]["message"], reply
            await ping(raw, n)
        # A call so sent is not made: no audit record, nothing written.
        call = {"name": "time__now", "arguments": {}}
        await raw.send('{"jsonrpc":"2.0","method":"tools/call","params":' + json.dumps(call)
                       + ',"id":' + request_id + "}")
        reply = await raw.reply()
        assert (reply["id"], reply["error"]["code"]) == (None, INVALID_REQUEST), reply
        await ping(raw, 9)
    events = [json.loads(x) for x in run_gormes(db, "events", "--json").stdout.splitlines()]
    assert not [e for e in events if e["type"] == "audit.operation"], events
    refused = [x for x in (tmp_path / "stderr").read_text().splitlines() if "refused a frame" in x]
    assert len(refused) == 3 and all(f"answered {INVALID_REQUEST}, id null" in x for x in refused), refused


async def test_a_notification_with_no_id_member_still_gets_no_reply(tmp_path: Path):
    # The same frames without their id are notifications, of methods a notification
    # has no handler for, and the session goes on without a word.
    async with raw_gormes_mcp(tmp_path / "g.db", tmp_path / "stderr") as raw:
        for n, method in enumerate(("tools/list", "ping", "notifications/cancelled")):
            await raw.send(json.dumps({"jsonrpc": "2.0", "method": method}))
            await raw.send(json.dumps({"jsonrpc": "2.0", "method": method, "params": {"id": True}}))
            await ping(raw, n)
    assert "refused a frame" not in (tmp_path / "stderr").read_text()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc")
async def test_the_wire_is_claimed_as_the_sdk_claims_it(tmp_path: Path):
    # gormes hands the SDK its own stdin (to keep each line for the check above),
    # claimed as the SDK claims it: while serving, fd 0 is the null device, so a
    # child reads EOF, and fd 1 is stderr, so a child's output misses the wire.
    async with raw_gormes_mcp(tmp_path / "g.db", tmp_path / "stderr") as raw:
        await ping(raw, 1)
        fds = Path(f"/proc/{raw.process.pid}/fd")
        assert (fds / "0").readlink() == Path("/dev/null")
        assert (fds / "1").readlink() == tmp_path / "stderr"


def test_the_sdk_still_has_the_helper_the_claim_borrows():
    # Without it `gormes mcp` still serves, but a request with a bad id goes
    # unanswered again (mcp_frames' import): an SDK upgrade must be looked at here.
    from gormes import mcp_frames

    assert mcp_frames._claim_fd is not None and mcp_frames._open_stdin_diversion is not None


async def test_replies_stay_whole_lines_among_the_sdks_own(tmp_path: Path):
    # Bad frames and requests sent without waiting: every line of stdout is one
    # whole JSON-RPC message and every id is answered once.
    async with raw_gormes_mcp(tmp_path / "g.db", tmp_path / "stderr") as raw:
        for n in range(20):
            await raw.send(deep_call(n, 300))
            await raw.request(100 + n, "tools/list")
        replies = [await raw.reply() for _ in range(40)]
    for reply in replies:
        jsonrpc_message_adapter.validate_python(reply)
    assert sorted(r["id"] for r in replies) == [*range(20), *range(100, 120)]
    assert {r["error"]["code"] for r in replies if r["id"] < 20} == {INVALID_REQUEST}


async def test_stderr_says_what_was_refused_never_the_frame(tmp_path: Path):
    marker = "frame-content-marker"
    huge = marker * 100_000  # 2 MB, shallow: not JSON
    nested = '{"jsonrpc":"2.0","id":1,"method":"x","params":{"s":"' + marker + '","a":' + deep(500) + "}}"
    async with raw_gormes_mcp(tmp_path / "g.db", tmp_path / "stderr") as raw:
        for line in (huge, nested):
            await raw.send(line)
            assert "error" in await raw.reply()
        await ping(raw, 2)
    lines = (tmp_path / "stderr").read_text().splitlines()
    refused = [line for line in lines if "refused a frame" in line]
    assert len(refused) == 2, lines
    assert f"({len(huge) + 1} characters): not JSON; answered {PARSE_ERROR}, id null" in refused[0]
    assert f"nested deeper than {MAX_NESTING} levels; answered {INVALID_REQUEST}, id 1" in refused[1]
    assert not [line for line in lines if marker in line]


async def test_the_sdk_client_calling_with_deep_arguments_gets_an_error_not_a_hang(tmp_path: Path):
    # 250: deeper than the server's parser goes (198 under `arguments.a`), not
    # deeper than the client's serializer (255; at 300 it refuses to send).
    async with gormes_mcp(tmp_path / "g.db") as client:
        with trio.fail_after(20):  # the client's own timeout is 60 s; before, this hung
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool("time__now", {"a": json.loads(deep(250))})
        assert refused.value.code == INVALID_REQUEST
        assert f"nested deeper than {MAX_NESTING} levels" in refused.value.message
        assert await call_ok(client, "time__now")


@pytest.mark.parametrize("text, expected", [
    (b'{"id":7,"p":{"a":' + deep(100_000).encode() + b'},"method":"x"}', {"id": 7, "p": None, "method": "x"}),
    (b'{"a":"[{","id":"}","b":{"c":"]"}}', {"a": "[{", "id": "}", "b": None}),
    (b'[' + deep(300).encode() + b"]", [None]),
    (b'{"id":1,"p":[[[', None),
    (b'{"id":3}]]', None),
    (b"hello", None),
])
def test_the_top_level_of_any_depth_is_read_flat(text: bytes, expected: Any):
    assert top_level(text) == expected


def random_value(rng: random.Random, depth: int) -> Any:
    pick = rng.random()
    if depth > 6 or pick < 0.3:
        return rng.choice([1, -2.5, True, None, "s", "[{", "]}", '"\\', "x\\"])
    if pick < 0.65:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["id", "a", "[", "}"]) + str(n): random_value(rng, depth + 1) for n in range(rng.randrange(4))}


def test_the_flat_top_level_agrees_with_a_decoder_where_one_can_decode():
    rng = random.Random(73)
    for _ in range(2000):
        value = random_value(rng, 0)
        expected = (
            {k: None if isinstance(v, (dict, list)) else v for k, v in value.items()} if isinstance(value, dict)
            else [None if isinstance(v, (dict, list)) else v for v in value] if isinstance(value, list)
            else value
        )
        for text in (json.dumps(value), json.dumps(value, indent=1)):
            assert top_level(text.encode()) == expected, text


def test_an_error_the_sdk_does_not_raise_today_is_still_answered():
    bad = judge(RuntimeError("a future SDK's own exception"))
    reply = bad.reply()
    assert reply is not None and (reply.id, reply.error.code) == (None, PARSE_ERROR)
