"""The operator's memory commands: memory.add_fact, memory.add_entity,
memory.relate, memory.review, memory.forget and memory.mirror.

Operator-only and never offered to models: what they record has `manual`
provenance and the operator's trust (it counts at once, in every scope recall
may see), and review and forget settle or remove anyone's memory. Models and
remote callers have memory.remember (gormes/tools/memory.py), whose writes wait
for review. memory.mirror writes the markdown mirror (gormes/memory/mirror.py)
into a directory the operator names, anywhere on this machine, so it is the
operator's alone too. `gormes memory add-fact|add-entity|relate|review|forget|
mirror` call these, audited like every other operation (decision 0019).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from gormes.events.memory import (
    MemoryEntityObserved,
    MemoryEvent,
    MemoryFactRecorded,
    MemoryForgotten,
    MemoryRelationshipObserved,
    MemoryRelationshipReviewed,
    Origin,
    memory_stream,
)
from gormes.errors import UserError
from gormes.events.jobs import JobSubmitted
from gormes.events.redaction import events_containing
from gormes.events.runs import RunStarted
from gormes.memory.mirror import MirrorResult, mirror_store
from gormes.memory.writer import MemoryTarget, MemoryWriter, Source, find_target, require_facts
from gormes.recall.api import DEFAULT_SCOPE
from gormes.tools.memory import MAX_FACT_CHARS, bound_scope
from gormes.ops.spec import OperationContext, OperationSpec, OperationUnavailable
from gormes.projections.memory import memory_projection
from gormes.projections.runner import ProjectionRunner
from gormes.tools.log_redact import Redaction, by_of, erase

if TYPE_CHECKING:
    from gormes.events.store import EventLog, EventStore

MIN_SEARCHED = 12  # characters: a shorter forgotten text is not searched for outside memory

OPERATOR = frozenset({"operator"})

Text = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_FACT_CHARS)]
Confidence = Annotated[float, msgspec.Meta(ge=0.0, le=1.0, description="How sure it is, 0 to 1.")]
Artifact = Annotated[str, msgspec.Meta(min_length=1,
                                        description="The artifact it comes from (default: the caller's id).")]
Why = Annotated[str, msgspec.Meta(description="Why.")]
EntityScope = Annotated[str, msgspec.Meta(description="The entity's scope (entities only).")]
# The operator names its scope (gormes/tools/memory.py `bound_scope`).
OwnScope = Annotated[str, msgspec.Meta(description=f"chat:<id> or project:<id>; default {DEFAULT_SCOPE}.")]


class AddFactInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Record a fact (trusted: the operator's own)."""

    text: Text
    subject: Annotated[str, msgspec.Meta(description="The entity the fact is about.")] | None = None
    supersedes: Annotated[list[Text], msgspec.Meta(description="A fact this one replaces.")] = []
    artifact: Artifact | None = None
    confidence: Confidence = 1.0
    scope: OwnScope | None = None


class AddEntityInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Record an entity."""

    name: Text
    kind: Annotated[str, msgspec.Meta(min_length=1, description="person, project, place, tool...")] = "thing"
    aliases: Annotated[list[Text], msgspec.Meta(description="Another name.")] = []
    scope: OwnScope | None = None


class RelateInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Record that `subject` `predicate` `object`."""

    subject: Text
    predicate: Text
    object: Text
    artifact: Artifact | None = None
    confidence: Confidence = 1.0
    scope: OwnScope | None = None


class ReviewInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Promote or reject an unreviewed relationship or fact."""

    id: Text
    verdict: Annotated[Literal["promoted", "rejected"], msgspec.Meta(
        description="promoted: it counts in every scope recall may see; rejected: it no longer counts anywhere.")]
    note: Why = ""


class ForgetInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Forget a fact, relationship or entity (`scope`: the entity's, for entities)."""

    id: Text
    reason: Why = ""
    scope: EntityScope | None = None
    everywhere: Annotated[bool, msgspec.Meta(description=(
        "Also erase the text where it lies outside the item's scope (another scope's "
        "memory, runs and jobs acting for another scope); without it such a forget is "
        "refused, nothing written."))] = False


class ForgetReachesOtherScopes(UserError):
    """A forgotten text also found outside the item's scope, without `everywhere`."""


class MirrorInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Write USER.md and one page per entity into directory `out`."""

    out: Annotated[str, msgspec.Meta(min_length=1, description="Directory to write USER.md and entities/ into.")]


def _store(ctx: OperationContext) -> EventStore:
    if ctx.store is None:
        raise OperationUnavailable("memory operations need an event store")
    return ctx.store


def _writer(ctx: OperationContext) -> MemoryWriter:
    return MemoryWriter(_store(ctx), clock=ctx.clock)


def _source(ctx: OperationContext, artifact: str | None, confidence: float) -> Source:
    return Source(origin=Origin(artifact=artifact or ctx.caller.id), kind="manual", trust=ctx.caller.trust,
                  confidence=confidence)


async def _read_memory(ctx: OperationContext, read: Any) -> Any:
    """`read(conn)` on the memory projection, caught up with the log first."""
    store = ctx.store
    await ProjectionRunner(store, memory_projection).catch_up(upto=await store.head())
    return await store.read_sql(read)


async def _target(ctx: OperationContext, target_id: str, scope: str | None) -> MemoryTarget:
    return await _read_memory(ctx, lambda conn: find_target(conn, target_id, scope))


async def add_fact(ctx: OperationContext, value: AddFactInput) -> MemoryFactRecorded:
    writer = _writer(ctx)
    scope = bound_scope(ctx.caller, value.scope)
    if value.supersedes:
        await _read_memory(ctx, lambda conn: require_facts(conn, value.supersedes, scope))
    return await writer.add_fact(scope, value.text, _source(ctx, value.artifact, value.confidence),
                                 subject=value.subject, supersedes=value.supersedes, seal=ctx.seal_into)


async def add_entity(ctx: OperationContext, value: AddEntityInput) -> MemoryEntityObserved:
    return await _writer(ctx).add_entity(bound_scope(ctx.caller, value.scope), value.name,
                                         _source(ctx, None, 1.0), kind=value.kind, aliases=value.aliases,
                                         seal=ctx.seal_into)


async def relate(ctx: OperationContext, value: RelateInput) -> MemoryRelationshipObserved:
    return await _writer(ctx).relate(bound_scope(ctx.caller, value.scope), value.subject, value.predicate,
                                     value.object, _source(ctx, value.artifact, value.confidence),
                                     seal=ctx.seal_into)


async def review(ctx: OperationContext, value: ReviewInput) -> MemoryRelationshipReviewed:
    writer = _writer(ctx)
    return await writer.review(await _target(ctx, value.id, None), value.verdict,
                               reviewer=ctx.caller.trust, note=value.note, seal=ctx.seal_into)


class Forgotten(msgspec.Struct, kw_only=True):
    forgotten: MemoryForgotten
    redaction: Redaction  # what left the log with it


def _carries(event: MemoryEvent, target: MemoryTarget) -> bool:
    """Whether `event` records (or reviews) what forgetting `target` removes."""
    i = target.id
    if isinstance(event, MemoryFactRecorded):
        return event.fact_id == i or (target.kind == "entity" and event.subject == i)
    if isinstance(event, MemoryRelationshipObserved):
        return event.relationship_id == i or (target.kind == "entity" and i in (event.subject, event.object))
    if isinstance(event, MemoryEntityObserved):
        return target.kind == "entity" and event.entity_id == i
    return isinstance(event, MemoryRelationshipReviewed) and event.target_id == i


def _erased(log: EventLog, target: MemoryTarget) -> tuple[list[int], dict[str, list[int]]]:
    """(the positions forgetting `target` redacts in its scope, those elsewhere by
    stream): see the module doc and `_in_scope`."""
    positions, texts = [], []
    for record in log.read_stream(memory_stream(target.scope)):
        e = record.event
        if not _carries(e, target):  # type: ignore[arg-type]
            continue
        positions.append(record.position)
        if isinstance(e, MemoryFactRecorded):
            text = e.text
        elif isinstance(e, MemoryRelationshipObserved):
            text = e.evidence
        else:
            continue
        if len(text) >= MIN_SEARCHED:
            texts.append(text)
    elsewhere: dict[str, list[int]] = {}
    scopes: dict[str, str | None] = {}
    for position, stream in events_containing(log.sql, texts):
        if _in_scope(log, stream, target.scope, scopes):
            positions.append(position)
        else:
            elsewhere.setdefault(stream, []).append(position)
    return positions, elsewhere


def _in_scope(log: EventLog, stream: str, scope: str, known: dict[str, str | None]) -> bool:
    """Whether `stream` acts for memory scope `scope`: the scope's own memory, a run
    acting in it (`run.started`'s scope; none: the default scope), a job submitted
    from it (its submitter's). A gateway chooses the text it remembers, so a
    text search alone would let it aim a forget at anyone's data (an attacker's
    finding): what lies in other streams is erased only when asked."""
    if stream.startswith("memory-"):
        return stream == memory_stream(scope)
    if stream not in known:
        first = log.read_stream(stream, 0, ("run.started", "job.submitted"))[:1]
        event = first[0].event if first else None
        if isinstance(event, RunStarted):
            known[stream] = event.scope or DEFAULT_SCOPE
        elif isinstance(event, JobSubmitted):
            known[stream] = (event.submitter.scope if event.submitter is not None else None) or DEFAULT_SCOPE
        else:
            known[stream] = None
    return known[stream] == scope


async def forget(ctx: OperationContext, value: ForgetInput) -> Forgotten:
    writer = _writer(ctx)
    target = await _target(ctx, value.id, value.scope)
    store = _store(ctx)
    positions, elsewhere = await store.read_with(lambda log: _erased(log, target))
    if elsewhere and not value.everywhere:
        found = sum(len(p) for p in elsewhere.values())
        shown = ", ".join(sorted(elsewhere)[:5]) + (", ..." if len(elsewhere) > 5 else "")
        raise ForgetReachesOtherScopes(
            f"the text of {target.id} is also in {found} event(s) outside scope {target.scope} ({shown}):"
            " nothing was forgotten; give --everywhere to erase them too, or redact what you mean to"
        )
    for more in elsewhere.values():
        positions += more
    event = await writer.forget(target, reason=value.reason)
    # The call's record goes with the last chunk, the one that completes the forget:
    # never with `memory.forgotten`, whose `ok` a call killed midway would belie.
    redaction = await erase(store, sorted(set(positions)), by=by_of(ctx),
                            reason=value.reason or f"memory.forget {target.id}", seal=ctx.seal_into)
    return Forgotten(forgotten=event, redaction=redaction)


async def mirror(ctx: OperationContext, value: MirrorInput) -> MirrorResult:
    # Written only below `out`: no symlink under it is followed (gormes/out_file.py `write_under`).
    return await mirror_store(_store(ctx), Path(value.out))


def _spec(name: str, description: str, handler: Any, input_type: type, output_type: type,
          timeout: float = 30.0, write_ahead: bool = False, needs_database: bool = False) -> OperationSpec:
    return OperationSpec(
        name=name, description=description, input_type=input_type, output_type=output_type, handler=handler,
        trust=OPERATOR, audit_kind="memory.write", mutating=True, idempotent=True, timeout=timeout,
        write_ahead=write_ahead, needs_database=needs_database,
    )


SPECS = (
    _spec("memory.add_fact", "Record a trusted fact, optionally superseding facts of its scope.", add_fact,
          AddFactInput, MemoryFactRecorded),
    _spec("memory.add_entity", "Record a trusted entity.", add_entity, AddEntityInput, MemoryEntityObserved),
    _spec("memory.relate", "Record a trusted relationship between two entities.", relate, RelateInput,
          MemoryRelationshipObserved),
    _spec("memory.review", "Promote or reject an unreviewed relationship or fact.", review, ReviewInput,
          MemoryRelationshipReviewed),
    _spec("memory.forget", "Forget a fact, relationship or entity, and erase what recorded it from the log.",
          forget, ForgetInput, Forgotten, timeout=600.0),
    # A mirror of a large memory is many pages: minutes, not the seconds of one write.
    # Made from the log (and it removes the pages of entities not there): a mistyped
    # --db would empty the directory, so a missing database is refused.
    _spec("memory.mirror", "Write memory as markdown into a directory: USER.md and one page per entity.",
          mirror, MirrorInput, MirrorResult, timeout=600.0, write_ahead=True,  # files, no transaction
          needs_database=True),
)
