"""Printing shared by the CLI's read commands.

For scripts: one JSON object per line (`gormes.events.jsonl.to_line`), written as
bytes and flushed line by line so a pipe sees each event as it comes. For people:
a rich table, or one compact line per event when following.

Nothing a gateway wrote reaches a person's terminal as a control sequence: each
value is shown through `gormes.printable.printable` (and given to rich as `Text`,
so `[bold]` stays text), and `gormes.printable.guard_standard_streams` (installed
by `gormes.cli.main`) makes every other line a command prints (click.echo, error
lines, rich in other modules) pass the same filter. JSON goes to the binary
buffer untouched: its encoder escapes already.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import msgspec

from gormes.events.base import Recorded
from gormes.events.jsonl import stored_json, to_line
from gormes.printable import printable

DATA_WIDTH = 80
_encoder = msgspec.json.Encoder()


def write_json_lines(records: Iterable[Recorded], *, flush_each: bool = False) -> None:
    out = sys.stdout.buffer
    for record in records:
        out.write(to_line(record))
        if flush_each:
            out.flush()
    out.flush()


def format_time(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).isoformat(sep=" ", timespec="milliseconds")


def data_text(record: Recorded, width: int | None = None) -> str:
    """The event's fields as compact JSON, without the redundant `type` key."""
    raw = stored_json(record)
    try:
        fields = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        text = bytes(raw).decode("utf-8", "replace")
    else:
        if isinstance(fields, dict):
            fields.pop("type", None)
        text = _encoder.encode(fields).decode()
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def human_line(record: Recorded) -> str:
    return printable(
        f"{record.position:>6}  {format_time(record.recorded_at)}  "
        f"{record.stream} v{record.version}  {record.type}  {data_text(record)}"
    )


def print_human_lines(records: Iterable[Recorded], *, flush_each: bool = False) -> None:
    out = sys.stdout
    for record in records:
        out.write(human_line(record) + "\n")
        if flush_each:
            out.flush()
    out.flush()


def print_events_table(records: Sequence[Recorded]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(show_edge=False, header_style="bold")
    table.add_column("position", justify="right")
    table.add_column("recorded at")
    table.add_column("stream")
    table.add_column("version", justify="right")
    table.add_column("type")
    table.add_column("data", overflow="fold")
    for r in records:
        table.add_row(*(Text(printable(cell)) for cell in (
            str(r.position), format_time(r.recorded_at), r.stream, str(r.version),
            r.type, data_text(r, DATA_WIDTH),
        )))
    console = Console()
    if records:
        console.print(table)
    else:
        console.print("no events")


def print_rows_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column)
    n = 0
    for row in rows:
        table.add_row(*(Text("NULL" if v is None else printable(str(v))) for v in row))
        n += 1
    console = Console()
    console.print(table)
    console.print(f"({n} row{'s' if n != 1 else ''})", style="dim")


def write_json_objects(objects: Iterable[Any]) -> None:
    """Any msgspec-encodable objects, one per line."""
    out = sys.stdout.buffer
    for obj in objects:
        out.write(_encoder.encode(obj) + b"\n")
    out.flush()

