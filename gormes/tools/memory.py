"""memory.recall, memory.remember and memory.extract.

Scopes and trust. The operator and system callers name the scope they work in
(default `project:default`). Gateway callers and child agents are pinned to
the caller's `scope` (a run carries its submitter's, decision 0016), else to
their own chat, `chat:<caller id>`: asking for any other scope is denied, and
so is cross-scope recall (gormes/recall/api.py: only the operator may widen).
What a non-operator, non-system caller remembers is recorded `unreviewed`.

Each untrusted class (every gateway together, every child agent together: an MCP
client names itself) holds at most `GORMES_GATEWAY_MAX_FACTS` live facts and
relationships, and may not remember again what was forgotten or another class
recorded (`check_held`, decision 0061): memory streams are never retained. The count
is read in the transaction that appends, under its write lock (decision 0068).

memory.extract reads a whole run and calls a model: operator and system only,
and not offered to models.
"""

from __future__ import annotations

import functools
import os
import re
from typing import TYPE_CHECKING, Annotated

import msgspec

from gormes.events.base import Event
from gormes.events.memory import MemoryFactRecorded, MemoryRelationshipObserved, Origin, is_valid_scope
from gormes.memory.extractor import ExtractResult, extract_run
from gormes.memory.writer import MemoryInputError, MemoryWriter, Source, fact_events, relationship_events
from gormes.ops.spec import (
    Caller,
    OperationContext,
    OperationDenied,
    OperationSpec,
    OperationUnavailable,
)
from gormes.projections.memory import held_by, memory_projection, recorded_from
from gormes.projections.runner import ProjectionRunner, catch_up_in
from gormes.providers import open_provider
from gormes.recall.api import (
    CROSS_SCOPE_TRUST,
    DEFAULT_K,
    DEFAULT_SCOPE,
    MAX_K,
    MAX_QUERY_CHARS,
    RecallResult,
    recall_in_store,
)
from gormes.settings import count_setting
from gormes.tools.job_trust import privileged

if TYPE_CHECKING:
    from gormes.events.store import Transaction

EVERYONE = frozenset({"operator", "gateway", "child-agent", "system"})
NAMES_ITS_SCOPE = frozenset({"operator", "system"})

Scope = Annotated[str, msgspec.Meta(description="chat:<id> or project:<id>; yours by default.")]


def own_scope(caller_id: str) -> str:
    """`chat:<caller id>`, made a valid scope when the id is not one as it stands (an
    MCP client is `mcp:<the name it gives>`): characters a scope may not hold become
    `-`, and it starts with a letter or digit and fits 200 characters. Two such ids
    can meet in one scope; MCP client names are self-declared, so they were never a
    boundary between clients (the trust class is)."""
    own = f"chat:{caller_id}"
    if is_valid_scope(own):
        return own
    safe = re.sub(r"[^A-Za-z0-9._@/-]", "-", caller_id)
    if not safe[:1].isalnum():
        safe = "x" + safe
    return f"chat:{safe[:200]}"


def bound_scope(caller: Caller, requested: str | None) -> str:
    """The scope a caller works in; a pinned caller asking for another is denied.
    The operator and system callers name theirs (default: `caller.scope`, else
    project:default); the others are pinned to `caller.scope` (a run acting for a
    gateway client: that client's), else to their own chat."""
    if caller.trust in NAMES_ITS_SCOPE:
        return requested or caller.scope or DEFAULT_SCOPE
    own = caller.scope or own_scope(caller.id)
    if requested is not None and requested != own:
        raise OperationDenied(f"a {caller.trust!r} caller may only use its own scope {own!r}, not {requested!r}")
    return own


def _store(ctx: OperationContext):
    if ctx.store is None:
        raise OperationUnavailable("memory operations need an event store")
    return ctx.store  # SQLite or PostgreSQL


class RecallInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Recall what memory holds about a query."""

    query: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_QUERY_CHARS, description="What to recall.")]
    mode: Annotated[str, msgspec.Meta(description="lexical, graph, semantic or fused (default).")] = "fused"
    k: Annotated[int, msgspec.Meta(ge=1, le=MAX_K)] = DEFAULT_K
    scope: Scope | None = None
    cross_scope: Annotated[bool, msgspec.Meta(description="Every scope (operator only).")] = False


# What one call may write (an attacker's finding: a gateway's 20 MB facts were
# taken, and memory streams are never retained; a 300-letter entity name broke
# the mirror's file names for everyone).
MAX_FACT_CHARS = 16_384
MAX_NAME_CHARS = 1_000
FactText = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_FACT_CHARS)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS)]


class Relation(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    subject: Name
    predicate: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS,
                                           description="A verb phrase: works at, prefers.")]
    object: Name


class RememberInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Remember a fact and/or a relationship between two entities."""

    fact: FactText | None = None
    subject: Annotated[str, msgspec.Meta(max_length=MAX_NAME_CHARS,
                                         description="The entity the fact is about.")] | None = None
    relation: Relation | None = None
    confidence: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 1.0
    scope: Scope | None = None


class RememberOutput(msgspec.Struct, kw_only=True):
    scope: str
    ids: list[str]
    review_state: str


# How much an untrusted class may hold. A fact is a sentence or two; 10,000 is far
# more than a chat's memory needs, and bounds what a class can pile into the log
# at about 10,000 remembers of at most 16 KB of fact and 3 KB of names each.
MAX_FACTS_ENV = "GORMES_GATEWAY_MAX_FACTS"
DEFAULT_MAX_FACTS = 10_000


def max_facts() -> int:
    """The operator's cap on the live facts and relationships of each untrusted class."""
    return count_setting(None, MAX_FACTS_ENV, os.environ, MAX_FACTS_ENV, DEFAULT_MAX_FACTS)


async def caught_up(ctx: OperationContext) -> None:
    """Fold into the memory projection what came since it last did (what recall
    would fold next), so that the fold a capped remember does under its write
    lock (`check_held`) is of the few events that came since."""
    store = _store(ctx)
    await ProjectionRunner(store, memory_projection).catch_up(upto=await store.head())


def check_held(tx: Transaction, *, caller: Caller, cap: int, facts: list[str], relationships: list[str]) -> None:
    """Refuse a gateway or child agent whose class would hold more than the cap once
    these facts and relationships are remembered. Run in the transaction that then
    appends them: the projection is folded to the log's head there, under the write
    lock, so concurrent remembers are counted one after the other (decision 0068).

    What it remembers must count against its class: a forgotten item stays
    forgotten (its repeat would go into the log and count nowhere), and another
    class's (a subagent of a gateway's run shares its scope) counts in that class."""
    trust = caller.trust
    catch_up_in(tx, memory_projection)
    held, found = held_by(tx.conn, trust), recorded_from(tx.conn, facts, relationships)
    for item, (source, forgotten) in found.items():
        if forgotten:
            raise OperationDenied(f"a {trust!r} caller may not remember {item} again: it was forgotten")
        if source != trust:
            raise OperationDenied(f"a {trust!r} caller may not remember {item} again: it is the {source!r} callers'")
    if held + len(facts) + len(relationships) > cap:
        raise OperationDenied(
            f"{trust!r} callers may hold at most {cap} facts and relationships between them"
            f" ({MAX_FACTS_ENV}; a repeat counts again, a forgotten one not at all)"
        )


class ExtractInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    run_id: Annotated[str, msgspec.Meta(min_length=1)]
    model: Annotated[str, msgspec.Meta(description="Provider spec: scripted:PATH or openai:MODEL.")]
    scope: Scope | None = None


async def memory_recall(ctx: OperationContext, value: RecallInput) -> RecallResult:
    scope = bound_scope(ctx.caller, value.scope)
    if value.cross_scope and ctx.caller.trust not in CROSS_SCOPE_TRUST:
        raise OperationDenied(f"a {ctx.caller.trust!r} caller may not recall across scopes")
    return await recall_in_store(
        _store(ctx), value.query, mode=value.mode, k=value.k, scope=scope, cross_scope=value.cross_scope,
        trust=ctx.caller.trust,
    )


async def memory_remember(ctx: OperationContext, value: RememberInput) -> RememberOutput:
    if value.fact is None and value.relation is None:
        raise MemoryInputError("memory.remember: give a fact, a relation, or both")
    scope = bound_scope(ctx.caller, value.scope)
    caller = ctx.caller
    source = Source(origin=Origin(run_id=caller.run_id, artifact=None if caller.run_id else f"caller:{caller.id}"),
                    kind="manual", trust=caller.trust, confidence=value.confidence)
    now = ctx.clock()
    events: list[Event] = []
    facts: list[str] = []
    relationships: list[str] = []
    state = ""
    if value.relation is not None:
        relation = value.relation
        events += relationship_events(scope, relation.subject, relation.predicate, relation.object, source, now)
        edge: MemoryRelationshipObserved = events[-1]  # type: ignore[assignment]  (the builder's last)
        relationships.append(edge.relationship_id)
        state = edge.review_state
    if value.fact is not None:
        events += fact_events(scope, value.fact, source, now, subject=value.subject)
        fact: MemoryFactRecorded = events[-1]  # type: ignore[assignment]  (the builder's last)
        facts.append(fact.fact_id)
        state = fact.review_state
    check = None
    if not privileged(caller):
        cap = max_facts()  # a bad setting is refused before anything is folded
        await caught_up(ctx)
        check = functools.partial(check_held, caller=caller, cap=cap, facts=facts, relationships=relationships)
    # One append, the call's audit record sealed into it: a relation and a fact are
    # remembered together or not at all, and never unaudited.
    await MemoryWriter(_store(ctx), clock=ctx.clock).append(scope, events, seal=ctx.seal_into, check=check)
    return RememberOutput(scope=scope, ids=relationships + facts, review_state=state)


async def memory_extract(ctx: OperationContext, value: ExtractInput) -> ExtractResult:
    scope = bound_scope(ctx.caller, value.scope)
    return await extract_run(_store(ctx), open_provider(value.model), value.run_id, scope, ctx.clock(),
                             seal=ctx.seal_into)


SPECS = (
    OperationSpec(
        name="memory.recall",
        description="Recall what memory holds about a query (facts and relationships), each with its score "
        "per mode and why it was selected. Recall stays in your scope.",
        input_type=RecallInput, output_type=RecallResult, handler=memory_recall, trust=EVERYONE,
        audit_kind="memory.read", prompt_visible=True, timeout=30.0, needs_database=True,
    ),
    OperationSpec(
        name="memory.remember",
        description="Remember a fact, or a relationship between two entities, in your scope. What remote "
        "callers and subagents remember waits for a person's review before it counts elsewhere.",
        input_type=RememberInput, output_type=RememberOutput, handler=memory_remember, trust=EVERYONE,
        audit_kind="memory.write", mutating=True, idempotent=True, prompt_visible=True, timeout=10.0,
    ),
    OperationSpec(
        name="memory.extract",
        description="Extract entities, relationships and facts from a run's turns through a model, with provenance.",
        input_type=ExtractInput, output_type=ExtractResult, handler=memory_extract,
        trust=frozenset({"operator", "system"}), audit_kind="memory.write", mutating=True, idempotent=False,
        timeout=120.0,
    ),
)
