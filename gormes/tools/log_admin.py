"""The operator's writes into the log: events.append and events.import.

Operator-only and never offered to models: `gormes append` and `gormes import`
call them through the executor, so each write (and each refusal) is one audit
event like any other operation's (decision 0019). The CLI only reads and parses
its input; the rules are here:

- append refuses audit records (`audit.*` types, `audit-*` streams): only the
  executor writes those, each sealed onto the day's hash chain;
- append's data is refused when nested deeper than `MAX_NESTING` (refused
  unread: the decoders recurse once per level), when it is not an object of the
  type's fields, or when it names a field the type does not have;
- import takes records already parsed (`gormes.events.jsonl.parse_lines`), or
  the path of a JSONL file it streams, and appends them all or none. Audit records in an import are accepted as they are:
  restoring an export restores its audit trail. A file can carry a chain of its
  own that verifies (a forged day), so the import records, in its transaction,
  one `log.imported` on `log-imports` (gormes/events/imports.py, decision 0087):
  the positions it took, the file's name and sha256, the caller, the audit days
  it touched; `gormes audit verify` and the doctor name those records as
  imported, never as sealed here. A file's own `log.imported` lines are left
  out, any other line on `log-imports` refused, and append refuses both;
- import and append refuse an event off its type's family of streams (a
  `memory.*` event not on a `memory-<scope>` stream, a `run.*` not on a `run-<id>`:
  gormes/events/families.py, decision 0086), live work or not: the checks below
  and the readers look for each kind of record on its family's streams only;
- import and append refuse live work unless `live_work` is set (a job not ended,
  a cron schedule not removed, a record for a run running here, a decision on an
  approval requested here, a memory or skill record that vouches for itself): it
  would act with the trust its records name (gormes/tools/import_live_work.py,
  gormes/tools/import_memory_claims.py; decisions 0059, 0068 and 0071).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from gormes.events.json_nesting import MAX_NESTING, nesting_depth_over
from gormes.errors import UserError
from gormes.events.audit import AUDIT_STREAM_PREFIX
from gormes.events.base import Event
from gormes.events.codec import default_codec
from gormes.events.imports import IMPORTS_STREAM, AuditDay, LogImported, is_marker_line
from gormes.events.families import off_family
from gormes.ops.spec import OperationContext, OperationDenied, OperationSpec

OPERATOR = frozenset({"operator"})
INT64_MAX = 2**63 - 1
IMPORT_TIMEOUT = 3600.0  # seconds: a large export restored in one transaction

Version = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]


class EventAppendInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One event of `type` for `stream`; `data` is its fields as a JSON object.
    `expected_version`: refuse unless the stream is at it (0: a new stream)."""

    stream: Annotated[str, msgspec.Meta(min_length=1)]
    type: str
    data: str = "{}"  # JSON text: checked for nesting before it is decoded
    expected_version: Version | None = None
    live_work: bool = False  # a job not ended, a schedule not removed...: refused without it


class EventAppended(msgspec.Struct, kw_only=True):
    stream: str
    type: str
    position: int
    version: int


def event_from(type_: str, stream: str, data: str) -> Event:
    """The event `data` describes, or a refusal saying what is wrong with it."""
    cls = default_codec.class_for(type_)
    if cls is None:
        return default_codec.parse(type_, data)  # says the type is unknown, naming the known ones
    if stream.startswith(AUDIT_STREAM_PREFIX) or cls.__struct_config__.tag.startswith("audit."):
        raise OperationDenied("audit records are written only by the operation executor; "
                              f"`append` refuses type {type_!r} on stream {stream!r}")
    if is_marker_line(stream, type_):
        raise OperationDenied(f"{IMPORTS_STREAM} records are written only by `gormes import` (decision 0087); "
                              f"`append` refuses type {type_!r} on stream {stream!r}")
    if (why := off_family(stream, cls.__struct_config__.tag)) is not None:
        raise UserError(f"{why}; nothing written")
    if nesting_depth_over(data.encode("utf-8", "surrogateescape")):
        raise UserError(f"--data is nested deeper than {MAX_NESTING} levels; refused unread")
    try:
        fields = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise UserError(f"malformed JSON for {type_!r}: {exc}") from None
    event = default_codec.parse(type_, fields)  # wrong and missing fields are named first
    known = {f.encode_name for f in msgspec.structs.fields(cls)} | {"type"}
    unknown = sorted(set(fields) - known)  # parse saw to it that `fields` is an object
    if unknown:
        raise UserError(f"unknown field(s) for {type_!r}: {', '.join(unknown)} "
                        "(see `gormes types`); nothing written")
    return event


async def events_append(ctx: OperationContext, value: EventAppendInput) -> EventAppended:
    # Lazy for start-up time: loaded on first use, not with the registry.
    from gormes.events.jsonl import ParsedLine
    from gormes.tools.import_live_work import LiveWorkWatch, refusal

    event = event_from(value.type, value.stream, value.data)

    def write(tx: Any) -> Any:
        watch = LiveWorkWatch(within="the append")
        watch.see(tx, ParsedLine(1, value.stream, event, None))
        result = tx.append(value.stream, [event], value.expected_version)
        if not value.live_work and (found := watch.found(tx)):
            raise UserError(refusal("the event", found, done="appended", do="Append", source="it"))
        ctx.seal_into(tx)  # the change and its audit record commit together
        return result

    result = await ctx.store.transact(write)
    return EventAppended(stream=value.stream, type=value.type, position=result.first_position,
                         version=result.version)


class ImportRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One parsed line of an import: its number in the file, and its event."""

    number: int
    stream: Annotated[str, msgspec.Meta(min_length=1)]
    event: Any  # an Event of a registered type (checked by the handler)
    version: Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX)] | None = None


class EventsImportInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Events to append in one transaction, all or none: parsed `records`, or a
    JSONL file (`path`, plain or gzip: an archived segment) streamed line by line
    so its size does not bound what can be imported. A record's `version` must
    follow its stream's version unless `ignore_versions`. `name` is what errors
    call the input (`-` for the standard input the CLI spooled to `path`)."""

    records: list[ImportRecord] = []
    path: str | None = None
    name: str | None = None
    ignore_versions: bool = False
    live_work: bool = False  # jobs not ended, cron schedules not removed: refused without it


class EventsImported(msgspec.Struct, kw_only=True, omit_defaults=True):
    imported: int
    first_position: int
    last_position: int
    recorded_at: int = 0  # the position of the import's `log.imported` record
    sha256: str | None = None  # of the file's bytes
    left_out: int = 0  # the file's own `log.imported` lines, not brought in


def _checked_records(records: list[ImportRecord]) -> list[Any]:
    # Lazy for start-up time: loaded on first use, not with the registry.
    from gormes.events.jsonl import ParsedLine

    if not records:
        raise UserError("an import holds no events")
    lines = []
    for record in records:
        event = record.event
        if not isinstance(event, Event) or default_codec.class_for(event.type) is not type(event):
            # JSON through `gormes ops call` decodes to dicts: the CLI parses the lines.
            raise UserError(f"record {record.number}: not a parsed event of a registered type "
                            "(`gormes import` parses the lines)")
        lines.append(ParsedLine(record.number, record.stream, event, record.version))
    return lines


def check_family(line: Any) -> None:
    """Refuse a parsed line whose event is off its type's family of streams."""
    if (why := off_family(line.stream, line.event.type)) is not None:
        raise UserError(f"line {line.number}: {why}; nothing was imported")


def _seen_by(tx: Any, watch: Any, days: dict[str, int]) -> Any:
    """What an import does with each line it brings (a file's own `log.imported`
    lines are left out before): its family checked, its live work watched, its
    audit day counted."""
    def seen(line: Any) -> None:
        check_family(line)
        watch.see(tx, line)
        _count_audit(days, line)

    return seen


async def events_import(ctx: OperationContext, value: EventsImportInput) -> EventsImported:
    # Lazy for start-up time: loaded on first use, not with the registry.
    from gormes.events import jsonl
    from gormes.tools.import_live_work import LiveWorkWatch, refusal

    check_versions = not value.ignore_versions

    def refuse_live_work(tx: Any, watch: LiveWorkWatch, name: str) -> None:
        if not value.live_work and (found := watch.found(tx)):
            raise UserError(refusal(name, found))  # undoes the whole import

    def record(tx: Any, result: Any, days: dict[str, int], name: str | None) -> int:
        """The import's `log.imported`, in its transaction, before its audit record."""
        marker = LogImported(
            first_position=result.first_position, last_position=result.last_position, imported=result.imported,
            name=name, sha256=result.sha256, caller=ctx.caller.id, trust=ctx.caller.trust, at=tx.now,
            # each day as it was placed: its own stream, or a copy (decision 0091)
            audit_days=tuple(_audit_day(tx, result.placed.get(stream, stream), n)
                             for stream, n in sorted(days.items())),
            left_out=result.left_out)
        return tx.append(IMPORTS_STREAM, [marker]).first_position

    if value.path is not None:
        if value.records:
            raise UserError("an import takes records or a path, not both")
        path, name = value.path, value.name or value.path

        def streamed(tx: Any) -> Any:
            watch, days = LiveWorkWatch(), {}
            try:
                result = jsonl.import_file_in(tx, path, check_versions=check_versions,
                                              seen=_seen_by(tx, watch, days))
            except UserError as exc:
                if path not in str(exc):
                    raise
                raise UserError(str(exc).replace(path, name)) from None
            refuse_live_work(tx, watch, name)
            marker = record(tx, result, days, name)
            ctx.seal_into(tx)  # the change and its audit record commit together
            return result, marker

        result = await ctx.store.transact(streamed)
    else:
        lines = _checked_records(value.records)

        def parsed(tx: Any) -> Any:
            watch, days = LiveWorkWatch(), {}
            seen = _seen_by(tx, watch, days)
            for line in lines:
                if not jsonl.marker_line(line):
                    seen(line)
            result = jsonl.import_lines_in(tx, lines, check_versions=check_versions)
            refuse_live_work(tx, watch, value.name or "the import")
            marker = record(tx, result, days, value.name)
            ctx.seal_into(tx)  # the change and its audit record commit together
            return result, marker

        result = await ctx.store.transact(parsed)
    result, marker = result
    return EventsImported(imported=result.imported, first_position=result.first_position,
                          last_position=result.last_position, recorded_at=marker, sha256=result.sha256,
                          left_out=result.left_out)


def _count_audit(days: dict[str, int], line: Any) -> None:
    if line.stream.startswith(AUDIT_STREAM_PREFIX):
        days[line.stream] = days.get(line.stream, 0) + 1


def _audit_day(tx: Any, stream: str, records: int) -> AuditDay:
    """The versions an import's `records` on `stream` took: its last ones, as the
    import appended them (its own audit record is sealed after this is read)."""
    last = tx.stream_version(stream)
    return AuditDay(stream=stream, records=records, first_version=last - records + 1, last_version=last)


def _write(name: str, description: str, handler: Any, input_type: type, output_type: type,
           timeout: float) -> OperationSpec:
    return OperationSpec(
        name=name, description=description, input_type=input_type, output_type=output_type,
        handler=handler, trust=OPERATOR, audit_kind="log.write", mutating=True, idempotent=False,
        timeout=timeout,
    )


SPECS = (
    _write("events.append", "Append one typed event to a stream (never an audit record).",
           events_append, EventAppendInput, EventAppended, 30.0),
    _write("events.import", "Append parsed JSONL records in one transaction, all or none.",
           events_import, EventsImportInput, EventsImported, IMPORT_TIMEOUT),
)
