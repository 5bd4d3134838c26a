"""Recall eval fixtures: small worlds of conversations and facts, and queries
with the answers a person expects.

One YAML file (or JSON object per JSONL line) per fixture under `evals/recall/`.
Items are named by a `key` unique in the fixture; queries name their relevant
items by key. Names of entities become ids with `entity_id`. Times (`at`) are
seconds after the fixture's `epoch`.

    name: people
    conversations:            # runs whose turns an extractor turned into observations
      - scope: chat:ada
        run: r-ada-1
        trust: operator       # the trust class of the text; gateway text stays unreviewed
        turns:
          - text: "I left Acme for Initech."
            at: 3600
            entities: [{name: Ada Lovelace, kind: person, aliases: [Ada]}]
            relationships: [{key: ada-initech, subject: Ada Lovelace, predicate: works_at, object: Initech}]
            facts: [{key: ada-job, text: Ada works at Initech, subject: Ada Lovelace, supersedes: [ada-job-old]}]
    facts:                    # facts written by hand or imported from a file
      - {key: ada-job-old, scope: chat:ada, text: Ada works at Acme, subject: Ada Lovelace, at: 0}
    reviews: [{target: some-key, verdict: promoted, at: 9000}]
    forget: [{target: some-key, at: 9500}]
    queries:
      - {id: ada-work, query: where does Ada work, scope: chat:ada, relevant: [ada-job, ada-initech], tags: [stale]}
      - {id: leak, query: Ada employer, scope: chat:bob, relevant: [], tags: [cross-scope]}
      - {id: denied, query: Ada, scope: chat:bob, cross_scope: true, trust: gateway, expect_denied: true}

This module parses and checks fixtures (pure, but for `load_fixtures` reading
files) and turns one into the memory events that seed it (`seed_events`).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Literal

import msgspec
import yaml

from gormes.data import shipped
from gormes.errors import UserError
from gormes.events.base import Event
from gormes.events.memory import (
    MemoryEntityObserved,
    MemoryFactRecorded,
    MemoryForgotten,
    MemoryRelationshipObserved,
    MemoryRelationshipReviewed,
    Origin,
    Provenance,
    entity_id,
    evidence_hash,
    fact_id,
    initial_review_state,
    is_valid_scope,
    memory_stream,
    relationship_id,
)

FIXTURE_SUFFIXES = (".yaml", ".yml", ".jsonl")
DEFAULT_FIXTURES_DIR = "evals/recall"
DEFAULT_EPOCH = 1_700_000_000.0
EXTRACTOR_VERSION = "eval-fixture"


class FixtureError(UserError):
    """A fixture that cannot be used: the file and what is wrong, on one line."""


class _Spec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class EntitySpec(_Spec, kw_only=True):
    name: str
    kind: str = "thing"
    aliases: tuple[str, ...] = ()


class RelationshipSpec(_Spec, kw_only=True):
    key: str
    subject: str  # an entity name
    predicate: str
    object: str
    confidence: float = 1.0


class FactSpec(_Spec, kw_only=True):
    key: str
    text: str
    subject: str | None = None
    supersedes: tuple[str, ...] = ()
    confidence: float = 1.0


class TurnSpec(_Spec, kw_only=True):
    text: str
    at: float
    entities: tuple[EntitySpec, ...] = ()
    relationships: tuple[RelationshipSpec, ...] = ()
    facts: tuple[FactSpec, ...] = ()


class ConversationSpec(_Spec, kw_only=True):
    scope: str
    run: str
    trust: str = "operator"
    turns: tuple[TurnSpec, ...]


class DocumentFactSpec(_Spec, kw_only=True):
    key: str
    scope: str
    text: str
    at: float
    subject: str | None = None
    supersedes: tuple[str, ...] = ()
    kind: Literal["manual", "imported"] = "manual"
    artifact: str | None = None


class ReviewSpec(_Spec, kw_only=True):
    target: str
    verdict: Literal["promoted", "rejected"]
    at: float


class ForgetSpec(_Spec, kw_only=True):
    target: str
    at: float
    reason: str = ""


class QuerySpec(_Spec, kw_only=True):
    id: str
    query: str
    scope: str
    relevant: tuple[str, ...] = ()  # keys; empty for a negative query
    never: tuple[str, ...] = ()  # keys that must not be returned
    cross_scope: bool = False
    trust: str = "operator"
    expect_denied: bool = False  # cross-scope recall this caller may not make
    tags: tuple[str, ...] = ()
    note: str = ""


class Fixture(_Spec, kw_only=True):
    name: str
    description: str = ""
    epoch: float = DEFAULT_EPOCH
    conversations: tuple[ConversationSpec, ...] = ()
    facts: tuple[DocumentFactSpec, ...] = ()
    reviews: tuple[ReviewSpec, ...] = ()
    forget: tuple[ForgetSpec, ...] = ()
    queries: tuple[QuerySpec, ...] = ()
    source: str = ""  # the file it came from (set by the loader)


class SeededItem(msgspec.Struct, frozen=True, kw_only=True):
    """A keyed fact or relationship as seeded: its id, kind and scope."""

    key: str
    id: str
    kind: Literal["fact", "relationship"]
    scope: str


class Seed(msgspec.Struct, frozen=True, kw_only=True):
    """A fixture's memory events per stream (in order), and its keyed items."""

    events: dict[str, list[Event]]
    items: dict[str, SeededItem]


# -- parsing ---------------------------------------------------------------------------


def parse_fixtures(text: str, source: str) -> list[Fixture]:
    """The fixtures in one file's text: a YAML document, or one JSON object per JSONL line."""
    if source.endswith(".jsonl"):
        raw: list[object] = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    raw.append(msgspec.json.decode(line))
                except msgspec.DecodeError as exc:
                    raise FixtureError(f"{source}: line {number}: not JSON: {exc}") from None
    else:
        try:
            raw = [yaml.safe_load(text)]
        except yaml.YAMLError as exc:
            raise FixtureError(f"{source}: broken YAML: {getattr(exc, 'problem', None) or exc}") from None
    fixtures = []
    for index, item in enumerate(raw, 1):
        where = source if len(raw) == 1 else f"{source}: fixture {index}"
        if not isinstance(item, dict):
            raise FixtureError(f"{where}: expected a mapping with name, conversations, facts and queries")
        try:
            fixture = msgspec.convert(item, Fixture)
        except msgspec.ValidationError as exc:
            raise FixtureError(f"{where}: {exc}") from None
        fixture = msgspec.structs.replace(fixture, source=where)
        check_fixture(fixture)
        fixtures.append(fixture)
    return fixtures


def fixtures_dir(explicit: str | Path | None = None) -> Path:
    """Where `gormes eval recall` reads fixtures: the explicit path, else
    `evals/recall/` here when it exists, else the fixtures shipped with gormes."""
    if explicit:
        return Path(explicit)
    here = Path(DEFAULT_FIXTURES_DIR)
    return here if here.is_dir() else shipped(*DEFAULT_FIXTURES_DIR.split("/"))


def load_fixtures(root: Path) -> list[Fixture]:
    """Every fixture under `root` (a directory, or one file), files sorted by name."""
    if root.is_file():
        paths = [root]
    elif root.is_dir():
        paths = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(FIXTURE_SUFFIXES))
    else:
        raise FixtureError(f"{root}: recall fixtures not found")
    fixtures: list[Fixture] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise FixtureError(f"{path}: cannot be read: {exc}") from None
        fixtures.extend(parse_fixtures(text, str(path)))
    if not any(f.queries for f in fixtures):
        raise FixtureError(f"{root}: no recall queries found")
    names = [f.name for f in fixtures]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise FixtureError(f"{root}: two fixtures are named {duplicate!r}")
    return fixtures


def check_fixture(fixture: Fixture) -> None:
    """Refuse what would make a fixture's numbers meaningless: bad scopes, unknown
    or duplicate keys, empty queries, a denial expected where none can happen."""
    where = fixture.source or fixture.name
    seed = seed_events(fixture)  # raises FixtureError on bad keys and scopes
    ids = [q.id for q in fixture.queries]
    for query in fixture.queries:
        at = f"{where}: query {query.id!r}"
        if ids.count(query.id) > 1:
            raise FixtureError(f"{at}: the id is used twice")
        if not query.query.strip():
            raise FixtureError(f"{at}: the query is empty")
        _check_scope(query.scope, at)
        for key in (*query.relevant, *query.never):
            if key not in seed.items:
                raise FixtureError(f"{at}: {key!r} is not a key of this fixture")
        if query.expect_denied and not query.cross_scope:
            raise FixtureError(f"{at}: expect_denied needs cross_scope: true")
        if set(query.relevant) & set(query.never):
            raise FixtureError(f"{at}: a key is both relevant and never")


def _check_scope(scope: str, where: str) -> None:
    if not is_valid_scope(scope):
        raise FixtureError(f"{where}: scope {scope!r} is not chat:<id> or project:<id>")


# -- seeding ---------------------------------------------------------------------------


def seed_events(fixture: Fixture) -> Seed:
    """The memory events that seed `fixture`, per stream in time order, and its keyed items."""
    where = fixture.source or fixture.name
    timed: list[tuple[float, int, str, Event]] = []
    items: dict[str, SeededItem] = {}
    facts_by_key: dict[str, tuple[str, str]] = {}  # key -> (scope, id), to resolve supersedes

    def keep(key: str, item: SeededItem) -> None:
        known = items.get(key)
        if known is not None and known != item:
            raise FixtureError(f"{where}: key {key!r} names two different items")
        items[key] = item

    def add(at: float, scope: str, event: Event) -> None:
        timed.append((at, len(timed), memory_stream(scope), event))

    pending_supersedes: list[tuple[str, tuple[str, ...], int]] = []
    for conversation in fixture.conversations:
        scope = conversation.scope
        _check_scope(scope, f"{where}: conversation {conversation.run!r}")
        for number, turn in enumerate(conversation.turns, 1):
            when = fixture.epoch + turn.at
            origin = Origin(run_id=conversation.run, turn_id=f"seq:{number}")
            named = {e.name: e for e in turn.entities}
            for rel in turn.relationships:
                named.setdefault(rel.subject, EntitySpec(name=rel.subject))
                named.setdefault(rel.object, EntitySpec(name=rel.object))
            for fact in turn.facts:
                if fact.subject:
                    named.setdefault(fact.subject, EntitySpec(name=fact.subject))
            for entity in named.values():
                add(when, scope, MemoryEntityObserved(
                    scope=scope, entity_id=entity_id(entity.name), name=entity.name, kind=entity.kind,
                    aliases=entity.aliases, origin=origin, provenance_kind="extracted", observed_at=when))

            for rel in turn.relationships:
                subject, object_ = entity_id(rel.subject), entity_id(rel.object)
                rid = relationship_id(scope, subject, rel.predicate, object_)
                keep(rel.key, SeededItem(key=rel.key, id=rid, kind="relationship", scope=scope))
                add(when, scope, MemoryRelationshipObserved(
                    relationship_id=rid, subject=subject, predicate=rel.predicate, object=object_,
                    provenance=_extracted(origin, scope, when, turn.text, conversation.trust, rel.confidence), review_state=initial_review_state(conversation.trust),
                    evidence=turn.text[:200]))
            for fact in turn.facts:
                fid = fact_id(scope, fact.text)
                keep(fact.key, SeededItem(key=fact.key, id=fid, kind="fact", scope=scope))
                facts_by_key[fact.key] = (scope, fid)
                pending_supersedes.append((fact.key, fact.supersedes, len(timed)))
                add(when, scope, MemoryFactRecorded(
                    fact_id=fid, text=fact.text, subject=entity_id(fact.subject) if fact.subject else None,
                    provenance=_extracted(origin, scope, when, turn.text, conversation.trust, fact.confidence), review_state=initial_review_state(conversation.trust)))
    for doc in fixture.facts:
        _check_scope(doc.scope, f"{where}: fact {doc.key!r}")
        when = fixture.epoch + doc.at
        fid = fact_id(doc.scope, doc.text)
        origin = Origin(artifact=doc.artifact or f"evals/recall/{fixture.name}")
        keep(doc.key, SeededItem(key=doc.key, id=fid, kind="fact", scope=doc.scope))
        facts_by_key[doc.key] = (doc.scope, fid)
        if doc.subject:
            add(when, doc.scope, MemoryEntityObserved(
                scope=doc.scope, entity_id=entity_id(doc.subject), name=doc.subject,
                origin=origin, provenance_kind=doc.kind, observed_at=when))
        pending_supersedes.append((doc.key, doc.supersedes, len(timed)))
        add(when, doc.scope, MemoryFactRecorded(
            fact_id=fid, text=doc.text, subject=entity_id(doc.subject) if doc.subject else None,
            provenance=Provenance(
                origin=origin, kind=doc.kind,
                scope=doc.scope, first_seen=when, last_seen=when, evidence_hash=evidence_hash(doc.text)),
            review_state="trusted"))
    for key, supersedes, index in pending_supersedes:
        if supersedes:
            unknown = [k for k in supersedes if k not in facts_by_key]
            if unknown:
                raise FixtureError(f"{where}: fact {key!r} supersedes unknown key {unknown[0]!r}")
            at, order, stream, event = timed[index]
            replaced = tuple(facts_by_key[k][1] for k in supersedes)
            timed[index] = (at, order, stream, msgspec.structs.replace(event, supersedes=replaced))
    for review in fixture.reviews:
        target = _target(items, review.target, where)
        add(fixture.epoch + review.at, target.scope, MemoryRelationshipReviewed(
            target_id=target.id, verdict=review.verdict, scope=target.scope,
            reviewed_at=fixture.epoch + review.at, target_kind=target.kind))
    for forget in fixture.forget:
        target = _target(items, forget.target, where)
        add(fixture.epoch + forget.at, target.scope, MemoryForgotten(
            target_id=target.id, target_kind=target.kind, scope=target.scope, reason=forget.reason,
            forgotten_at=fixture.epoch + forget.at))
    by_stream: dict[str, list[Event]] = defaultdict(list)
    for _, _, stream, event in sorted(timed, key=lambda t: (t[0], t[1])):
        by_stream[stream].append(event)
    return Seed(events=dict(by_stream), items=items)


def _extracted(origin: Origin, scope: str, when: float, text: str, trust: str, confidence: float) -> Provenance:
    return Provenance(
        origin=origin, kind="extracted", scope=scope, extractor_version=EXTRACTOR_VERSION, confidence=confidence,
        first_seen=when, last_seen=when, evidence_hash=evidence_hash(text), source_trust=trust)


def _target(items: dict[str, SeededItem], key: str, where: str) -> SeededItem:
    if key not in items:
        raise FixtureError(f"{where}: review or forget names unknown key {key!r}")
    return items[key]
