"""What an imported memory or skill record would vouch for here (decision 0071).

A record someone else's log holds says who recorded it and how it was judged, and
this log believes it: a fact `trusted` (or marked as the operator's) is served
without "(unreviewed)" and, being trusted, to the operator's cross-scope recall;
a review promotes or rejects an item, a forget hides one, `supersedes` marks
facts stale (by id: in any scope); and a `skill.feedback` is the operator's verdict,
which `gormes skills promote` counts as evidence. Those are a person's word on
the other log: an import, an append and a migrate continuation refuse them unless
`--live-work` says the file speaks for this host. What imports as history is what
claims nothing: an observation recorded `unreviewed` from an untrusted class, on
the stream of its own scope, under the id its content gives (so it can land on no
other item); entities (they carry no class); skill selections (the `skill_usage`
rows, read by people) and `skill.promoted` (a skill's status is its SKILL.md
file's, which an import does not write).

`claim(stream, event)` is pure: one phrase for the refusal, or None for history.
"""

from __future__ import annotations

from typing import Any

from gormes.events.memory import (
    TRUSTED_SOURCES,
    MemoryEntityObserved,
    MemoryFactRecorded,
    MemoryForgotten,
    MemoryRelationshipObserved,
    MemoryRelationshipReviewed,
    fact_id,
    memory_stream,
    relationship_id,
)
from gormes.events.skills import SkillFeedback, skill_stream

MEMORY_STREAM_PREFIX = memory_stream("")
SKILL_STREAM_PREFIX = skill_stream("")


def claim(stream: str, event: Any) -> str | None:
    """The phrase naming what `event` on `stream` vouches for here; None for history."""
    if stream.startswith(MEMORY_STREAM_PREFIX):
        return _memory(stream.removeprefix(MEMORY_STREAM_PREFIX), event)
    if stream.startswith(SKILL_STREAM_PREFIX) and isinstance(event, SkillFeedback):
        return f"feedback {event.verdict} on skill {event.skill} for run {event.run_id}, as the operator's"
    return None


def _memory(scope: str, event: Any) -> str | None:
    if isinstance(event, MemoryFactRecorded):
        return _observation("fact", event.fact_id, fact_id(scope, event.text), scope, event) or (
            f"fact {event.fact_id} superseding {', '.join(event.supersedes)}" if event.supersedes else None)
    if isinstance(event, MemoryRelationshipObserved):
        own_id = relationship_id(scope, event.subject, event.predicate, event.object)
        return _observation("relationship", event.relationship_id, own_id, scope, event)
    if isinstance(event, MemoryRelationshipReviewed):
        return f"a review of {event.target_kind} {event.target_id} ({event.verdict})"
    if isinstance(event, MemoryForgotten):
        return f"a forget of {event.target_kind} {event.target_id} in {event.scope}"
    if isinstance(event, MemoryEntityObserved) and event.scope != scope:
        return f"entity {event.entity_id} on memory-{scope} claiming scope {event.scope}"
    return None


def _observation(kind: str, item: str, own_id: str, scope: str,
                 event: MemoryFactRecorded | MemoryRelationshipObserved) -> str | None:
    provenance = event.provenance
    if provenance.scope != scope:
        return f"{kind} {item} on memory-{scope} claiming scope {provenance.scope}"
    if item != own_id:
        return f"{kind} {item} under an id not its content's"
    if event.review_state != "unreviewed" or provenance.source_trust in TRUSTED_SOURCES:
        return f"{kind} {item} in {scope} recorded as {provenance.source_trust}'s ({event.review_state})"
    return None
