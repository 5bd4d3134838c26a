"""Memory events, on one stream per scope: `memory-<scope>`.

A scope is where something was observed: a chat (`chat:<id>`) or a project
(`project:<id>`). Recall in one scope never sees another's memory unless the
caller asks for cross-scope recall and may (see gormes/recall/api.py).

Every relationship and fact carries its `Provenance`: where it came from (a run
and turn, or a source artifact), which extractor and version produced it, how
confident it was, when it was first and last seen, the sha256 of the evidence
text, the kind of provenance and the trust class of the text it came from.

Ids are derived from content, so observing the same thing again lands on the
same row: an entity's id is its normalised name (`entity_id`), a relationship's
is a hash of (scope, subject, predicate, object), a fact's a hash of (scope,
text). A repeat observation moves `last_seen` and keeps `first_seen`.

Times are seconds since the epoch taken from the injected clock when the event
was made, never read by the projection, so a rebuild gives the same tables.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Literal

import msgspec

from gormes.events.base import Event

ProvenanceKind = Literal["manual", "extracted", "imported", "reviewed"]
ReviewVerdict = Literal["promoted", "rejected"]
# `trusted`: from trusted text or a person, usable everywhere the scope allows;
# `unreviewed`: from untrusted text (gateway input), usable only in its own scope;
# `promoted` / `rejected`: a person's review of an unreviewed item.
ReviewState = Literal["trusted", "unreviewed", "promoted", "rejected"]
ForgettableKind = Literal["fact", "relationship", "entity"]
ReviewableKind = Literal["relationship", "fact"]

# Trust classes whose text is taken at its word; anything else needs review.
TRUSTED_SOURCES: frozenset[str] = frozenset({"operator", "system"})

_SCOPE = re.compile(r"^(chat|project):[A-Za-z0-9][A-Za-z0-9._@/-]{0,199}$")


def memory_stream(scope: str) -> str:
    return f"memory-{scope}"


def is_valid_scope(scope: str) -> bool:
    return bool(_SCOPE.match(scope))


def entity_id(name: str) -> str:
    """The id of an entity named `name`: lowercase words joined by `-` ("Ada Lovelace" -> "ada-lovelace")."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    words = re.findall(r"\w+", folded)
    return "-".join(words)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def relationship_id(scope: str, subject: str, predicate: str, object_: str) -> str:
    return "r_" + _digest(scope, subject, predicate.strip().casefold(), object_)[:16]


def fact_id(scope: str, text: str) -> str:
    return "f_" + _digest(scope, " ".join(text.split()).casefold())[:16]


def evidence_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def initial_review_state(source_trust: str) -> ReviewState:
    return "trusted" if source_trust in TRUSTED_SOURCES else "unreviewed"


class Origin(msgspec.Struct, frozen=True, kw_only=True):
    """Where an observation came from: a run's turn, or a source artifact (a file path)."""

    run_id: str | None = None
    turn_id: str | None = None  # "seq:<n>" of the run's observation, when from a run
    artifact: str | None = None

    def describe(self) -> str:
        if self.run_id is not None:
            return f"run {self.run_id}" + (f" turn {self.turn_id}" if self.turn_id else "")
        if self.artifact is not None:
            return f"artifact {self.artifact}"
        return "unknown origin"


class Provenance(msgspec.Struct, frozen=True, kw_only=True):
    origin: Origin
    kind: ProvenanceKind
    scope: str
    extractor_version: str = ""  # "" for manual and imported items
    confidence: float = 1.0
    first_seen: float
    last_seen: float
    evidence_hash: str
    source_trust: str = "operator"  # trust class of the text it came from


class MemoryEntityObserved(Event, tag="memory.entity_observed", kw_only=True):
    scope: str
    entity_id: str
    name: str
    kind: str = "thing"  # person, project, place, tool...: free text from the extractor
    aliases: tuple[str, ...] = ()
    origin: Origin = Origin()
    provenance_kind: ProvenanceKind = "manual"
    observed_at: float


class MemoryRelationshipObserved(Event, tag="memory.relationship_observed", kw_only=True):
    relationship_id: str
    subject: str  # entity id
    predicate: str  # a verb phrase: "works_at", "prefers"
    object: str  # entity id
    provenance: Provenance
    review_state: ReviewState  # initial: see initial_review_state
    evidence: str = ""  # a short excerpt of the evidence text, for people
    subject_name: str = ""  # the entities' names as observed, for text and mirrors
    object_name: str = ""


class MemoryFactRecorded(Event, tag="memory.fact_recorded", kw_only=True):
    fact_id: str
    text: str
    subject: str | None = None  # entity id the fact is about, when known
    provenance: Provenance
    review_state: ReviewState
    supersedes: tuple[str, ...] = ()  # fact ids this one replaces (they become stale)


class MemoryRelationshipReviewed(Event, tag="memory.relationship_reviewed", kw_only=True):
    """A person's verdict on an unreviewed item (a relationship, or a fact)."""

    target_id: str
    verdict: ReviewVerdict
    scope: str
    reviewer: str = "operator"
    note: str = ""
    reviewed_at: float
    target_kind: ReviewableKind = "relationship"


class MemoryForgotten(Event, tag="memory.forgotten", kw_only=True):
    """Leaves recall and the mirrors; the log keeps what was said."""

    target_id: str
    target_kind: ForgettableKind
    scope: str
    reason: str = ""
    forgotten_at: float


MemoryEvent = (
    MemoryEntityObserved | MemoryRelationshipObserved | MemoryFactRecorded
    | MemoryRelationshipReviewed | MemoryForgotten
)
