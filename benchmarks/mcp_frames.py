"""What answering the MCP SDK's unreadable frames costs a readable one (decision 0073).

`gormes mcp` reads the SDK's stdio read stream through `AnsweringBadFrames`,
which passes a parsed message on after one isinstance check (two for a
notification, whose line is read again for an id: decision 0077). Each sample
feeds LINES lines of one kind through the SDK's `stdio_server` (stdin an
in-memory iterator, stdout unused) and reads every message off its read stream:

- wrapped: stdin through `KeptLines` and the read stream through
  `AnsweringBadFrames`, as `gormes mcp` serves;
- plain: the SDK's read stream itself (the comparator, the tree before 0073).

Three kinds of line: an ordinary `tools/call` (`job__submit`, a few hundred
bytes), a huge but shallow one (the same call carrying a 1 MiB string), and a
small notification (`notifications/progress`). The two variants alternate sample
by sample.

Then what a refused frame costs: `judge` on the SDK's exception for a 1 MiB
frame of each refused kind, beside the SDK's own failed parse of it (the
comparator). Prints one JSON line: medians in microseconds, and `ratio`, wrapped
over plain (judge over parse), for each kind.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))
from _common import median, progress, report  # noqa: E402

from mcp.server.stdio import stdio_server  # noqa: E402

from mcp_types import jsonrpc_message_adapter  # noqa: E402

from gormes.mcp_frames import AnsweringBadFrames, KeptLines, judge, judge_notification  # noqa: E402

SAMPLES = 21
KINDS = {"ordinary": (2000, 0), "huge_shallow": (100, 1 << 20), "notification": (2000, -1)}  # lines, padding
MIB = 1 << 20
REFUSED = {
    "not_json": "x" * MIB,
    "no_jsonrpc": json.dumps({"id": 1, "method": "tools/call", "params": {"pad": "x" * MIB}}),
    "too_deep": '{"jsonrpc":"2.0","id":1,"method":"x","params":' + "[" * (MIB // 2) + "]" * (MIB // 2) + "}",
    # the worst shape for the flat scan: one bracket per step
    "too_deep_wide": '{"jsonrpc":"2.0","id":1,"method":"x","params":[' + "[" * 300 + "]" * 300
                     + ",[]" * (MIB // 3) + "]}",
}


def tools_call(n: int, padding: int) -> str:
    if padding < 0:
        return json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                           "params": {"progressToken": n, "progress": n}}) + "\n"
    arguments = {"name": "echo", "data": {"n": n, "pad": "x" * padding}, "queue": "default"}
    return json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call",
                       "params": {"name": "job__submit", "arguments": arguments}}) + "\n"


class Lines:
    """An async iterable of lines, as the SDK reads its stdin."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    async def __aiter__(self) -> AsyncIterator[str]:
        for line in self.lines:
            yield line


class Unused:
    async def write(self, text: str) -> None:
        raise AssertionError("nothing is written")

    async def flush(self) -> None:
        pass


async def per_line_us(lines: list[str], wrapped: bool) -> float:
    stdin = KeptLines(Lines(lines)) if wrapped else Lines(lines)
    async with stdio_server(stdin=stdin, stdout=Unused()) as (read_stream, write_stream):  # type: ignore[arg-type]
        stream = (AnsweringBadFrames(read_stream, write_stream, progress, lines=stdin)  # type: ignore[arg-type]
                  if wrapped else read_stream)
        start = time.perf_counter()
        count = 0
        async for _ in stream:
            count += 1
        elapsed = time.perf_counter() - start
        await write_stream.aclose()
    assert count == len(lines)
    return elapsed / count * 1e6


async def main() -> None:
    result: dict[str, object] = {"benchmark": "mcp_frames", "samples": SAMPLES}
    for kind, (count, padding) in KINDS.items():
        lines = [tools_call(n, padding) for n in range(count)]
        progress(f"mcp_frames: {kind}, {count} lines of {len(lines[0])} characters ...")
        times: dict[str, list[float]] = {"wrapped": [], "plain": []}
        for _ in range(SAMPLES):
            for variant in ("wrapped", "plain"):
                times[variant].append(await per_line_us(lines, variant == "wrapped"))
        wrapped, plain = median(times["wrapped"]), median(times["plain"])
        result[kind] = {"chars": len(lines[0]), "wrapped_us": round(wrapped, 2), "plain_us": round(plain, 2),
                        "ratio": round(wrapped / plain, 3)}
    for kind, frame in REFUSED.items():
        progress(f"mcp_frames: refused {kind}, {len(frame)} characters ...")
        parse, judged = [], []
        for _ in range(SAMPLES):
            start = time.perf_counter()
            try:
                jsonrpc_message_adapter.validate_json(frame, by_name=False)
            except Exception as exc:  # noqa: BLE001 - the SDK's failure, as its transport gets it
                failure = exc
            parse.append(time.perf_counter() - start)
            start = time.perf_counter()
            judge(failure)
            judged.append(time.perf_counter() - start)
        result[f"refused_{kind}"] = {"chars": len(frame), "judge_us": round(median(judged) * 1e6, 1),
                                     "sdk_parse_us": round(median(parse) * 1e6, 1),
                                     "ratio": round(median(judged) / median(parse), 3)}
    # A request whose id is no request id: the SDK reads a notification, then its
    # line is decoded again (msgspec, every member but `method` and `id` skipped).
    frame = json.dumps({"jsonrpc": "2.0", "id": True, "method": "tools/call", "params": {"pad": "x" * MIB}})
    progress(f"mcp_frames: refused no_request_id, {len(frame)} characters ...")
    parse, judged = [], []
    for _ in range(SAMPLES):
        start = time.perf_counter()
        message = jsonrpc_message_adapter.validate_json(frame, by_name=False)
        parse.append(time.perf_counter() - start)
        start = time.perf_counter()
        assert judge_notification(message, frame) is not None  # type: ignore[arg-type]
        judged.append(time.perf_counter() - start)
    result["refused_no_request_id"] = {"chars": len(frame), "judge_us": round(median(judged) * 1e6, 1),
                                       "sdk_parse_us": round(median(parse) * 1e6, 1),
                                       "ratio": round(median(judged) / median(parse), 3)}
    report(result)


if __name__ == "__main__":
    trio.run(main)
