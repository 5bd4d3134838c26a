"""Writing memory: build `memory.*` events and append them through the store.

Everything goes to the scope's stream `memory-<scope>`. The builders are pure
(time is passed in); `MemoryWriter` adds the injected clock and the append.

A relationship or fact's review state starts from the trust class of the text it
came from (`source_trust`): `trusted` for the operator and system, `unreviewed`
for anything else (gateway input, child agents), until a person reviews it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from gormes.errors import UserError
from gormes.events.memory import (
    ForgettableKind,
    MemoryEntityObserved,
    MemoryFactRecorded,
    MemoryForgotten,
    MemoryRelationshipObserved,
    MemoryRelationshipReviewed,
    Origin,
    Provenance,
    ProvenanceKind,
    ReviewVerdict,
    entity_id,
    evidence_hash,
    fact_id,
    initial_review_state,
    is_valid_scope,
    memory_stream,
    relationship_id,
)
from gormes.projections.memory import ENTITIES, FACTS, RELATIONSHIPS

if TYPE_CHECKING:
    from gormes.events.audit_seal import Seal
    from gormes.events.base import Event
    from gormes.events.store import AppendResult, EventStore, Transaction

EVIDENCE_EXCERPT = 280


class MemoryInputError(UserError):
    """Memory input that cannot be recorded (bad scope, empty name, unknown id)."""


class Source(msgspec.Struct, frozen=True, kw_only=True):
    """Where an observation comes from and how much to believe it."""

    origin: Origin  # a run and turn, or an artifact: never neither
    kind: ProvenanceKind = "manual"
    trust: str = "operator"  # the trust class of the text
    extractor_version: str = ""
    confidence: float = 1.0
    evidence: str = ""  # the text it was read from (hashed; an excerpt is kept)


def check_scope(scope: str) -> str:
    if not is_valid_scope(scope):
        raise MemoryInputError(f"memory: scope {scope!r} is not chat:<id> or project:<id>")
    return scope


def _entity_key(name: str) -> str:
    key = entity_id(name)
    if not key:
        raise MemoryInputError(f"memory: entity name {name!r} has no letters or digits")
    return key


def _provenance(scope: str, source: Source, now: float, fallback_evidence: str) -> Provenance:
    if source.origin.run_id is None and source.origin.artifact is None:
        raise MemoryInputError("memory: an observation needs an origin (a run and turn, or an artifact)")
    if not 0.0 <= source.confidence <= 1.0:
        raise MemoryInputError(f"memory: confidence must be within 0..1, got {source.confidence}")
    return Provenance(
        origin=source.origin, kind=source.kind, scope=scope, extractor_version=source.extractor_version,
        confidence=source.confidence, first_seen=now, last_seen=now,
        evidence_hash=evidence_hash(source.evidence or fallback_evidence), source_trust=source.trust,
    )


def entity_event(scope: str, name: str, source: Source, now: float, *, kind: str = "thing",
                 aliases: Sequence[str] = ()) -> MemoryEntityObserved:
    name = " ".join(name.split())
    return MemoryEntityObserved(
        scope=check_scope(scope), entity_id=_entity_key(name), name=name, kind=kind or "thing",
        aliases=tuple(sorted({a.strip() for a in aliases if a.strip()})), origin=source.origin,
        provenance_kind=source.kind, observed_at=now,
    )


def relationship_events(scope: str, subject: str, predicate: str, object_: str, source: Source,
                        now: float) -> list[Event]:
    """The two endpoint entities and the relationship between them."""
    predicate = "_".join(predicate.split()).casefold()
    if not predicate:
        raise MemoryInputError("memory: a relationship needs a predicate")
    ends = [entity_event(scope, subject, source, now), entity_event(scope, object_, source, now)]
    text = f"{ends[0].name} {predicate} {ends[1].name}"
    edge = MemoryRelationshipObserved(
        relationship_id=relationship_id(scope, ends[0].entity_id, predicate, ends[1].entity_id),
        subject=ends[0].entity_id, predicate=predicate, object=ends[1].entity_id,
        provenance=_provenance(scope, source, now, text), review_state=initial_review_state(source.trust),
        evidence=(source.evidence or "")[:EVIDENCE_EXCERPT],
        subject_name=ends[0].name, object_name=ends[1].name,
    )
    return [*ends, edge]


def fact_events(scope: str, text: str, source: Source, now: float, *, subject: str | None = None,
                supersedes: Sequence[str] = ()) -> list[Event]:
    text = " ".join(text.split())
    if not text:
        raise MemoryInputError("memory: a fact needs some text")
    events: list[Event] = []
    subject_id = None
    if subject:
        entity = entity_event(scope, subject, source, now)
        events.append(entity)
        subject_id = entity.entity_id
    events.append(MemoryFactRecorded(
        fact_id=fact_id(check_scope(scope), text), text=text, subject=subject_id,
        provenance=_provenance(scope, source, now, text), review_state=initial_review_state(source.trust),
        supersedes=tuple(supersedes),
    ))
    return events


class MemoryTarget(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    kind: str  # "fact" | "relationship" | "entity"
    scope: str
    review_state: str = ""


def find_target(conn: sqlite3.Connection, target_id: str, scope: str | None = None) -> MemoryTarget:
    """Look an id up in the memory projection (facts and relationships by id,
    entities by id within `scope`); `MemoryInputError` if it is not there."""
    for table, key, kind in ((RELATIONSHIPS, "relationship_id", "relationship"), (FACTS, "fact_id", "fact")):
        try:
            row = conn.execute(f"SELECT scope, review_state FROM {table} WHERE {key} = ?", (target_id,)).fetchone()
        except sqlite3.OperationalError:
            row = None  # the projection was never built: nothing to find
        if row:
            return MemoryTarget(id=target_id, kind=kind, scope=row[0], review_state=row[1])
    if scope is not None:
        try:
            row = conn.execute(f"SELECT 1 FROM {ENTITIES} WHERE scope = ? AND entity_id = ?", (scope, target_id)).fetchone()
        except sqlite3.OperationalError:
            row = None
        if row:
            return MemoryTarget(id=target_id, kind="entity", scope=scope)
    raise MemoryInputError(f"memory: no fact, relationship{' or entity' if scope else ''} with id {target_id!r}")


def require_facts(conn: sqlite3.Connection, fact_ids: Sequence[str], scope: str) -> None:
    """Refuse (`MemoryInputError`) a fact id that is not a fact of `scope` in the
    memory projection: a fact may only supersede facts that exist, in its own scope
    (superseding marks the old fact stale wherever it is)."""
    for wanted in fact_ids:
        try:
            row = conn.execute(f"SELECT scope FROM {FACTS} WHERE fact_id = ?", (wanted,)).fetchone()
        except sqlite3.OperationalError:
            row = None  # the projection was never built: no fact exists
        if row is None:
            raise MemoryInputError(f"memory: --supersedes {wanted!r}: no such fact")
        if row[0] != scope:
            raise MemoryInputError(f"memory: --supersedes {wanted!r}: that fact is in scope {row[0]!r}, not {scope!r}")


class MemoryWriter:
    """Appends memory events to `memory-<scope>` through an event store."""

    def __init__(self, store: EventStore, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    async def append(self, scope: str, events: Sequence[Event], *, seal: Seal | None = None,
                     check: Callable[[Transaction], None] | None = None) -> AppendResult:
        """`seal(tx)`: also written in the append's transaction (an operation call's
        audit record, `OperationContext.seal_into`). `check(tx)`: run in it before
        the append, which it may refuse by raising (nothing is then written)."""
        stream = memory_stream(check_scope(scope))
        if seal is None and check is None:
            return await self.store.append(stream, list(events))

        def write(tx: Transaction) -> AppendResult:
            if check is not None:
                check(tx)
            appended = tx.append(stream, list(events))
            if seal is not None:
                seal(tx)
            return appended

        return await self.store.transact(write)

    async def add_entity(self, scope: str, name: str, source: Source, *, kind: str = "thing",
                         aliases: Sequence[str] = (), seal: Seal | None = None) -> MemoryEntityObserved:
        event = entity_event(scope, name, source, self.clock(), kind=kind, aliases=aliases)
        await self.append(scope, [event], seal=seal)
        return event

    async def relate(self, scope: str, subject: str, predicate: str, object_: str,
                     source: Source, *, seal: Seal | None = None) -> MemoryRelationshipObserved:
        events = relationship_events(scope, subject, predicate, object_, source, self.clock())
        await self.append(scope, events, seal=seal)
        return events[-1]  # type: ignore[return-value]

    async def add_fact(self, scope: str, text: str, source: Source, *, subject: str | None = None,
                       supersedes: Sequence[str] = (), seal: Seal | None = None) -> MemoryFactRecorded:
        events = fact_events(scope, text, source, self.clock(), subject=subject, supersedes=supersedes)
        await self.append(scope, events, seal=seal)
        return events[-1]  # type: ignore[return-value]

    async def review(self, target: MemoryTarget, verdict: ReviewVerdict, *, reviewer: str = "operator",
                     note: str = "", seal: Seal | None = None) -> MemoryRelationshipReviewed:
        if target.kind not in ("relationship", "fact"):
            raise MemoryInputError(f"memory: only relationships and facts are reviewed, not {target.kind}s")
        event = MemoryRelationshipReviewed(
            target_id=target.id, target_kind=target.kind, verdict=verdict, scope=target.scope,  # type: ignore[arg-type]
            reviewer=reviewer, note=note, reviewed_at=self.clock(),
        )
        await self.append(target.scope, [event], seal=seal)
        return event

    async def forget(self, target: MemoryTarget, *, reason: str = "") -> MemoryForgotten:
        kind: ForgettableKind = target.kind  # type: ignore[assignment]
        event = MemoryForgotten(target_id=target.id, target_kind=kind, scope=target.scope, reason=reason,
                                forgotten_at=self.clock())
        await self.append(target.scope, [event])
        return event
