"""The audit trail's hash chain: sealing each audit record, and verifying every day.

Each day stream `audit-YYYY-MM-DD` is one chain (decision 0018). A record at
version v of stream s is sealed with `prev` (the digest of the record at v - 1, or
`GENESIS` for the day's first) and

    digest = sha256(prev "\\n" s "\\n" v "\\n" canonical)

where `canonical` is the record's JSON (`OperationAudited` with its `type` tag)
without `digest`, with the fields that hold their declared default left out (so a
field added later with a default does not change old digests), keys sorted, no
whitespace. Sealing reads the stream's last record and appends in the writer's
transaction (`seal`), so two processes cannot chain onto the same record; each
process remembers the heads it sealed (`_Heads`), so the common case reads
nothing but the stream's version.

    await append_sealed(store, AppendRequest(stream, [event]), also=[run_request])
    days = verify_chains(conn, codec, since_day="2026-12-01")

What the chain does not prove: see docs/decisions/0018-audit-hash-chain.md. A
file given to `gormes import` can bring a day whose chain verifies (it was made
elsewhere, or forged): `verify_chains` names, per day, the records an import
brought and the import (its `log.imported` record, gormes/events/imports.py),
and a record sealed here that chains onto one of them (decision 0087).
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

import msgspec
import trio

from gormes.events import audit_open
from gormes.events.audit import AUDIT_STREAM_PREFIX, OperationAudited, day_stream
from gormes.events.base import UnknownEvent
from gormes.events.codec import Codec
from gormes.events.imports import ImportRanges, Marker, read_imports
from gormes.events.postgres_sql import iter_rows
from gormes.events.sql_fragments import text_order
from gormes.events.store import AppendRequest, AppendResult, EventStore, Transaction

log = logging.getLogger("gormes.audit")
GENESIS = "0" * 64  # the `prev` of a day's first sealed record
# After the open calls' index failed to build (a busy database, a lock timeout), the
# first write-ahead call this long after tries again; the wait doubles after each
# failure, up to the last, so a store that can never build it (a role that may not
# create a table) costs one try that often.
INDEX_RETRY_S = (1.0, 300.0)

_encoder = msgspec.json.Encoder(order="sorted")
_TAG = OperationAudited.__struct_config__.tag
# (JSON name, attribute, declared default) of every field but `digest`
_FIELDS = tuple(
    (f.encode_name, f.name, f.default) for f in msgspec.structs.fields(OperationAudited) if f.name != "digest"
)


def canonical_bytes(event: OperationAudited) -> bytes:
    """The record's JSON as its digest covers it (see the module doc)."""
    data: dict[str, object] = {"type": _TAG}
    for key, name, default in _FIELDS:
        value = getattr(event, name)
        if default is msgspec.NODEFAULT or value != default or type(value) is not type(default):
            data[key] = value
    return _encoder.encode(data)


def record_digest(event: OperationAudited, stream: str, version: int) -> str:
    """The digest a record sealed at (`stream`, `version`) must carry (its `prev` included)."""
    head = f"{event.prev}\n{stream}\n{version}\n".encode()
    return hashlib.sha256(head + canonical_bytes(event)).hexdigest()


def sealed(event: OperationAudited, stream: str, version: int, prev: str) -> OperationAudited:
    linked = msgspec.structs.replace(event, prev=prev, digest=None)
    return msgspec.structs.replace(linked, digest=record_digest(linked, stream, version))


# -- sealing ------------------------------------------------------------------------

Head = tuple[int, str]  # (version, digest) of a sealed record


class _Heads:
    """What one store's process knows of its streams' last sealed records.

    `committed`: the newest head this process committed on each stream; a fact
    about a committed row, so only remembered after the commit. `pending`: heads
    sealed in the writer's current transaction (`batch`, one group commit),
    touched only in the writer's thread. Both are checked against the stream's
    version before use. A pending head of a part of the batch that was rolled
    back cannot match: both stores hold their write lock for the whole batch
    (SQLite's BEGIN IMMEDIATE, PostgreSQL's LOCK TABLE), so the stream's version
    can only come back to it through another seal of this batch, which
    replaces it."""

    __slots__ = ("batch", "committed", "index_due", "index_wait", "indexed", "pending")

    def __init__(self) -> None:
        self.indexed = False  # the open calls' index is current, or being made (see `_index`)
        self.index_due = 0.0  # trio time before which a failed build is not tried again
        self.index_wait = 0.0  # the wait after the last failed build (0: none failed)
        self.committed: dict[str, Head] = {}
        self.batch: object | None = None
        self.pending: dict[str, Head] = {}

    def known(self, tx: Transaction, stream: str, version: int) -> Head | None:
        batch = tx.commit_group
        if batch is not self.batch:
            self.batch, self.pending = batch, {}
        for head in (self.pending.get(stream), self.committed.get(stream)):
            if head is not None and head[0] == version:
                return head
        return None

    def sealed(self, stream: str, head: Head) -> None:
        if self.batch is not None:
            self.pending[stream] = head

    def committed_head(self, stream: str, head: Head) -> None:
        if head[0] > self.committed.get(stream, (0, ""))[0]:
            self.committed[stream] = head


_heads: weakref.WeakKeyDictionary[Any, _Heads] = weakref.WeakKeyDictionary()


def seal(
    tx: Transaction, stream: str, events: Sequence[Any], known: Head | None = None
) -> tuple[AppendResult, Head]:
    """Seal `events` (OperationAudited) onto `stream` inside transaction `tx`,
    chained to the stream's last record; returns the append and the new head.
    `known`: a head of this stream (skips reading the last record when the
    stream is at that head's version)."""
    version = tx.stream_version(stream)
    prev = _prev_of(tx, stream, version, known)
    chained = []
    for i, event in enumerate(events, start=1):
        if not isinstance(event, OperationAudited):
            raise TypeError(f"only audit.operation records go on {stream}, not {type(event).__name__}")
        event = sealed(event, stream, version + i, prev)
        chained.append(event)
        prev = event.digest  # type: ignore[assignment]
    result = tx.append(stream, chained, expected_version=version)
    if any(_write_ahead(e) for e in chained):
        started = [result.first_position + i for i, e in enumerate(chained) if e.outcome == "started"]
        ended = [e.started_position for e in chained if e.started_position is not None]
        tx.execute("SELECT 1")  # what the batch staged sent first, as the index's SQL follows it
        audit_open.index_in(tx.conn, started, ended)
    return result, (result.version, prev)


def _write_ahead(event: OperationAudited) -> bool:
    """A write-ahead call's record (decision 0062): its `started` one, or the outcome naming it."""
    return event.outcome == "started" or event.started_position is not None


def _prev_of(tx: Transaction, stream: str, version: int, known: Head | None) -> str:
    if version == 0:
        return GENESIS
    if known is not None and known[0] == version:
        return known[1]
    last = tx.read_stream(stream, after_version=version - 1)
    event = last[-1].event if last else None
    # after records written before the chain (no digest), the chain starts afresh
    return event.digest if isinstance(event, OperationAudited) and event.digest else GENESIS


async def append_sealed(
    store: EventStore, audit: AppendRequest, also: Iterable[AppendRequest] = (), *, held: bool = False
) -> list[AppendResult]:
    """Seal and append the audit request, and append `also` (a run's record of the
    same call), in one transaction. Returns the audit's result, then `also`'s.
    `held`: wait for the commit whatever cancel comes (`EventStore.transact_held`)."""
    try:
        heads = _heads.setdefault(store, _Heads())
    except TypeError:  # a store that takes no weak reference: nothing remembered
        heads = _Heads()
    # a store that may not write has no index to keep: the record itself is refused
    if not heads.indexed and not store.readonly and any(_write_ahead(e) for e in audit.events):
        await _index(store, heads)
    others = list(also)
    stream = audit.stream

    def write(tx: Transaction) -> tuple[list[AppendResult], Head]:
        result, head = seal(tx, stream, audit.events, heads.known(tx, stream, tx.stream_version(stream)))
        results = [result, *(tx.append(r.stream, r.events, r.expected_version) for r in others)]
        heads.sealed(stream, head)
        return results, head

    results, head = await (store.transact_held(write) if held else store.transact(write))
    heads.committed_head(stream, head)
    return results


async def _index(store: EventStore, heads: _Heads) -> None:
    """Make the open calls' index current (gormes/events/audit_open.py), once per
    store and process, before its first write-ahead record: a read finds it
    current, or a transaction of its own makes it. Shielded: the caller's record
    may be one that no cancel stops.

    Only the first caller makes it: marked at once, so that the calls that start
    beside it do not each read and build again. They need not wait for it: what
    commits before its transaction it reads from the log, and what commits after
    is indexed by its seal (`audit_open.index_in`).

    A build that fails (a busy database, a lock timeout, a role that may not create
    a table) still lets the audit record be taken, and reads fall back to the log.
    The mark is taken back: the first write-ahead call after `INDEX_RETRY_S` tries
    again, alone as the first did, and the calls before it do not."""
    if heads.index_wait and trio.current_time() < heads.index_due:
        return
    heads.indexed = True

    def ensure(tx: Transaction) -> None:
        tx.execute("SELECT 1")  # send what this batch staged before us, for the build to see
        audit_open.ensure(tx.conn)

    with trio.CancelScope(shield=True):
        try:
            if await store.read_sql(audit_open.keeping) == audit_open.MISSING:
                await store.transact(ensure)
        except Exception as exc:  # noqa: BLE001 (the index spares reads; the record is what counts)
            first, most = INDEX_RETRY_S
            heads.index_wait = min(max(heads.index_wait * 2, first), most)
            heads.index_due = trio.current_time() + heads.index_wait
            heads.indexed = False
            log.warning("the open calls' index could not be built (%s: %s); tried again in %.0f s, and until"
                        " then `gormes audit unfinished` reads the log", type(exc).__name__, exc, heads.index_wait)


# -- verifying ----------------------------------------------------------------------


class ChainBreak(msgspec.Struct, frozen=True, kw_only=True):
    """The first record of a day that does not chain: where, and what was expected."""

    position: int
    version: int
    reason: str
    expected: str | None = None
    found: str | None = None


class DayImport(msgspec.Struct, frozen=True, kw_only=True):
    """An import that brought records to a day: its `log.imported` record's
    position, when, who, which file (name and sha256), and how many records."""

    position: int
    at: str  # ISO-8601, UTC
    caller: str
    trust: str
    name: str | None
    sha256: str | None
    records: int


class ChainJoin(msgspec.Struct, frozen=True, kw_only=True):
    """The first record sealed here whose previous record on its day came by an
    import: this log's chain goes on from a head it did not seal."""

    position: int
    version: int
    onto_position: int  # the imported record it follows
    import_position: int  # the `log.imported` that brought it


class DayChain(msgspec.Struct, frozen=True, kw_only=True):
    day: str  # YYYY-MM-DD
    stream: str
    records: int
    sealed: int
    unsealed: int  # records written before the chain (a leading run of them only)
    head: str | None  # the last sealed record's digest: anchor it elsewhere
    intact: bool
    first_break: ChainBreak | None = None
    # Where the records come from (decision 0087): "here" (written by this log),
    # "imported" (every one brought by an import), or "mixed".
    origin: str = "here"
    here: int = 0
    imported: int = 0
    imports: tuple[DayImport, ...] = ()
    onto_import: ChainJoin | None = None


class _DayWalk:
    """One day's chain, checked record by record in version order."""

    def __init__(self, stream: str, ranges: ImportRanges) -> None:
        self.stream = stream
        self.ranges = ranges
        self.records = self.sealed = self.unsealed = 0
        self.expected_prev = GENESIS
        self.version = 0
        self.head: str | None = None
        self.first_break: ChainBreak | None = None
        self.here = 0
        self.by_import: dict[int, list[Any]] = {}  # marker position -> [Marker, records]
        self.last: tuple[int, Marker | None] | None = None  # the previous record: position, its import
        self.onto_import: ChainJoin | None = None

    def add(self, position: int, version: int, type_: str, event: Any) -> None:
        self.records += 1
        self._origin(position, version, event)
        if self.first_break is None:
            reason = self._check(version, type_, event)
            if reason is not None:
                self.first_break = ChainBreak(position=position, version=version, **reason)
        self.version = version
        if isinstance(event, OperationAudited) and event.digest:
            self.sealed += 1
            self.head = event.digest
            self.expected_prev = event.digest
        elif isinstance(event, OperationAudited):
            self.unsealed += 1

    def _origin(self, position: int, version: int, event: Any) -> None:
        marker = self.ranges.of(position) if self.ranges else None
        if marker is None:
            self.here += 1
            last = self.last
            if (self.onto_import is None and last is not None and last[1] is not None
                    and isinstance(event, OperationAudited) and event.digest):
                self.onto_import = ChainJoin(position=position, version=version, onto_position=last[0],
                                             import_position=last[1].position)
        else:
            self.by_import.setdefault(marker.position, [marker, 0])[1] += 1
        self.last = (position, marker)

    def _check(self, version: int, type_: str, event: Any) -> dict[str, Any] | None:
        if version != self.version + 1:
            return {"reason": f"version {self.version + 1} is missing (a deleted record?)",
                    "expected": str(self.version + 1), "found": str(version)}
        if event is None or (isinstance(event, UnknownEvent) and type_ == "audit.operation"):
            return {"reason": "the record does not decode as audit.operation (edited?)"}
        if not isinstance(event, OperationAudited):
            return {"reason": f"a {type_} event on an audit stream", "expected": "audit.operation",
                    "found": type_}
        if event.digest is None:
            if self.sealed:
                return {"reason": "an unsealed record after the chain began (inserted?)"}
            return None
        if event.prev != self.expected_prev:
            return {"reason": "prev is not the previous record's digest (a record deleted, moved or inserted?)",
                    "expected": self.expected_prev, "found": event.prev}
        digest = record_digest(event, day_stream(self.stream), version)  # a copy's too (0091)
        if digest != event.digest:
            return {"reason": "the digest does not match the record (edited?)",
                    "expected": digest, "found": event.digest}
        return None

    def result(self, after_chain_began: bool) -> DayChain:
        first_break = self.first_break
        if first_break is None and after_chain_began and self.records and not self.sealed:
            first_break = ChainBreak(position=0, version=1, reason="a whole day of unsealed records after the chain began")
        imported = self.records - self.here
        return DayChain(
            day=self.stream.removeprefix(AUDIT_STREAM_PREFIX), stream=self.stream, records=self.records,
            sealed=self.sealed, unsealed=self.unsealed, head=self.head, intact=first_break is None,
            first_break=first_break, here=self.here, imported=imported,
            origin="here" if not imported else "mixed" if self.here else "imported",
            imports=tuple(_day_import(marker, n) for marker, n in self.by_import.values()),
            onto_import=self.onto_import,
        )


def _day_import(marker: Marker, records: int) -> DayImport:
    e = marker.event
    at = datetime.fromtimestamp(e.at, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return DayImport(position=marker.position, at=at, caller=e.caller, trust=e.trust, name=e.name,
                     sha256=e.sha256, records=records)


def verify_chains(conn: Any, codec: Codec, *, since_day: str | None = None,
                  markers: Sequence[Marker] | None = None) -> list[DayChain]:
    """Every audit day's chain (from `since_day`, YYYY-MM-DD, on), in day order,
    with which of its records came by an import (the log's `log.imported`
    records, read here unless given as `markers`). `conn`: an sqlite3 connection
    or a PortableConnection (PostgreSQL)."""
    ranges = ImportRanges(read_imports(conn, codec) if markers is None else markers)
    return list(_walk_days(conn, codec, since_day, ranges))


def _walk_days(conn: Any, codec: Codec, since_day: str | None, ranges: ImportRanges) -> Iterator[DayChain]:
    stream_col = text_order(conn, "stream")
    first = AUDIT_STREAM_PREFIX + (since_day or "")
    sql = ("SELECT position, stream, version, type, type_version, data FROM events "
           f"WHERE {stream_col} >= ? AND {stream_col} < ? ORDER BY {stream_col}, version")
    walk: _DayWalk | None = None
    chain_began = False
    for position, stream, version, type_, type_version, data in iter_rows(conn, sql, [first, AUDIT_STREAM_PREFIX + "\uffff"]):
        if walk is None or walk.stream != stream:
            if walk is not None:
                day = walk.result(chain_began)
                chain_began = chain_began or day.sealed > 0
                yield day
            walk = _DayWalk(stream, ranges)
        walk.add(position, version, type_, _decode(codec, type_, type_version, data))
    if walk is not None:
        yield walk.result(chain_began)


def _decode(codec: Codec, type_: str, type_version: int, data: Any) -> Any:
    try:
        return codec.decode(type_, type_version, data)
    except Exception:  # noqa: BLE001 - a row that does not decode is a break, reported as such
        return None
