"""The extractor: a run's turns -> memory observations, through a model provider.

It reads the run's events (its input, the inbox messages it read, the model's
replies), asks the model for entities, relationships and facts as JSON citing
the turn each came from, and turns the answer into `memory.*` events with
provenance (run and turn id, extractor version, confidence, evidence hash).

Trust follows the text. A turn's trust is the least trusted of the run's trust
class and, for inbox messages, the sender's (anyone but the operator is
untrusted); a model reply is as trusted as the least trusted turn before it
(a reply can repeat anything it was shown). An observation citing no known
turn takes the least trusted turn of the run. Observations from untrusted
turns are recorded `unreviewed` (see gormes/events/memory.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from gormes.providers.base import Message, ModelRequest, Provider
from gormes.errors import UserError
from gormes.events.memory import TRUSTED_SOURCES, Origin
from gormes.events.memory import (
    MemoryFactRecorded,
    MemoryRelationshipObserved,
)
from gormes.events.runs import RunInboxRead, RunLlmTurn, RunStarted
from gormes.events.runs import run_stream
from gormes.memory.writer import MemoryWriter, Source, check_scope, entity_event, fact_events, relationship_events

if TYPE_CHECKING:
    from gormes.events.audit_seal import Seal
    from gormes.events.base import Event, Recorded
    from gormes.events.store import EventStore

EXTRACTOR_VERSION = "memory-extractor/1"
UNTRUSTED = "gateway"

SYSTEM_PROMPT = (
    "You extract durable memory from a conversation. Reply with one JSON object and nothing else: "
    '{"entities": [{"name": str, "kind": str, "aliases": [str]}], '
    '"relationships": [{"subject": str, "predicate": str, "object": str, "confidence": 0..1, "turn": turn id, '
    '"evidence": quoted text}], "facts": [{"text": str, "subject": entity name or null, "confidence": 0..1, '
    '"turn": turn id}]}. Cite the turn id each item comes from. Leave out anything uncertain or passing.'
)


class ExtractionError(UserError):
    """The model's answer is not an extraction, or the run cannot be read."""


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    id: str  # "input", "seq:<n>" or "seq:<n>:<message id>"
    role: str  # user | assistant
    text: str
    trust: str


class ExtractedEntity(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    kind: str = "thing"
    aliases: tuple[str, ...] = ()


class ExtractedRelationship(msgspec.Struct, frozen=True, kw_only=True):
    subject: str
    predicate: str
    object: str
    confidence: float = 0.8
    turn: str | None = None
    evidence: str = ""


class ExtractedFact(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    subject: str | None = None
    confidence: float = 0.8
    turn: str | None = None


class Extraction(msgspec.Struct, frozen=True, kw_only=True):
    entities: tuple[ExtractedEntity, ...] = ()
    relationships: tuple[ExtractedRelationship, ...] = ()
    facts: tuple[ExtractedFact, ...] = ()


def _least_trusted(*classes: str) -> str:
    return next((c for c in classes if c not in TRUSTED_SOURCES), classes[0] if classes else UNTRUSTED)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else msgspec.json.encode(value, order="sorted").decode()


def run_turns(records: Sequence[Recorded]) -> list[Turn]:
    """The turns of one run, in order, each with the trust of its text."""
    turns: list[Turn] = []
    run_trust = UNTRUSTED
    for r in records:
        e = r.event
        if isinstance(e, RunStarted):
            run_trust = e.trust
            if e.input is not None:
                turns.append(Turn(id="input", role="user", text=_text(e.input), trust=run_trust))
        elif isinstance(e, RunInboxRead):
            for m in e.messages:
                sender = "operator" if m.sender == "operator" else UNTRUSTED
                turns.append(Turn(id=f"seq:{e.seq}:{m.id}", role="user", text=_text(m.payload),
                                  trust=_least_trusted(run_trust, sender)))
        elif isinstance(e, RunLlmTurn) and e.reply.content:
            seen = _least_trusted(run_trust, *(t.trust for t in turns))
            turns.append(Turn(id=f"seq:{e.seq}", role="assistant", text=e.reply.content, trust=seen))
    return turns


def extraction_request(model: str, turns: Sequence[Turn]) -> ModelRequest:
    body = "\n".join(f"[{t.id}] {t.role}: {t.text}" for t in turns)
    return ModelRequest(
        model=model, temperature=0.0,
        messages=(Message(role="system", content=SYSTEM_PROMPT), Message(role="user", content=body)),
    )


def parse_extraction(content: str) -> Extraction:
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        return msgspec.json.decode(text, type=Extraction)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ExtractionError(f"memory extract: the model's answer is not an extraction: {exc}") from None


def observation_events(scope: str, run_id: str, turns: Sequence[Turn], extraction: Extraction, now: float) -> list[Event]:
    by_id = {t.id: t for t in turns}
    fallback = _least_trusted(*(t.trust for t in turns)) if turns else UNTRUSTED

    def source(turn_id: str | None, confidence: float, evidence: str) -> Source:
        turn = by_id.get(turn_id or "")
        return Source(
            origin=Origin(run_id=run_id, turn_id=turn.id if turn else None), kind="extracted",
            trust=turn.trust if turn else fallback, extractor_version=EXTRACTOR_VERSION,
            confidence=min(max(confidence, 0.0), 1.0), evidence=evidence or (turn.text if turn else ""),
        )

    events: list[Event] = []
    for entity in extraction.entities:
        events.append(entity_event(scope, entity.name, source(None, 1.0, ""), now, kind=entity.kind, aliases=entity.aliases))
    for rel in extraction.relationships:
        events += relationship_events(scope, rel.subject, rel.predicate, rel.object,
                                      source(rel.turn, rel.confidence, rel.evidence), now)
    for fact in extraction.facts:
        events += fact_events(scope, fact.text, source(fact.turn, fact.confidence, ""), now, subject=fact.subject)
    return events


class ExtractResult(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    scope: str
    turns: int
    entities: int
    relationships: int
    facts: int
    unreviewed: int  # relationships and facts held for review (untrusted text)


async def extract_run(store: EventStore, provider: Provider, run_id: str, scope: str, now: float, *,
                      seal: Seal | None = None) -> ExtractResult:
    """Read run `run_id`, ask `provider` for observations, append them to `memory-<scope>`
    in one transaction, `seal(tx)` written in it too (an operation call's audit record)."""
    check_scope(scope)
    records = await store.read_stream(run_stream(run_id))
    if not records:
        raise ExtractionError(f"memory extract: no run {run_id!r} in this database")
    turns = run_turns(records)
    reply = await provider.complete(extraction_request(provider.model, turns))
    events = observation_events(scope, run_id, turns, parse_extraction(reply.message.content), now)
    if events:
        await MemoryWriter(store).append(scope, events, seal=seal)
    edges = [e for e in events if isinstance(e, MemoryRelationshipObserved)]
    facts = [e for e in events if isinstance(e, MemoryFactRecorded)]
    return ExtractResult(
        run_id=run_id, scope=scope, turns=len(turns), entities=len({e.entity_id for e in events if hasattr(e, "entity_id")}),
        relationships=len(edges), facts=len(facts),
        unreviewed=sum(1 for e in [*edges, *facts] if e.review_state == "unreviewed"),
    )
