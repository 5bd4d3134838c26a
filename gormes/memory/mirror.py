"""Markdown mirrors of memory: `USER.md` and one page per entity.

    OUT/USER.md                          every scope: its entities and facts
    OUT/entities/<scope>/<entity>.md     an entity, its relationships with provenance

Rendering is pure and deterministic (rows sorted, no clock, fixed number
formats), and a file is only rewritten when its bytes change, so running the
mirror twice changes nothing. Pages of entities no longer in memory are removed.
Forgotten and rejected items are left out; unreviewed ones are marked.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from gormes.out_file import write_under
from gormes.printable import printable
from gormes.projections.memory import ENTITIES, FACTS, RELATIONSHIPS, memory_projection
from gormes.projections.runner import ProjectionRunner

if TYPE_CHECKING:
    from gormes.events.store import EventStore

USER_PAGE = "USER.md"
ENTITY_DIR = "entities"


class Entity(msgspec.Struct, frozen=True, kw_only=True):
    scope: str
    entity_id: str
    name: str
    kind: str
    aliases: tuple[str, ...]


class Edge(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    scope: str
    subject: str
    predicate: str
    object: str
    text: str
    review_state: str
    provenance_kind: str
    origin: str
    extractor_version: str
    confidence: float
    first_seen: float
    last_seen: float
    evidence_hash: str
    source_trust: str


class Fact(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    scope: str
    text: str
    subject: str | None
    review_state: str
    stale: bool
    provenance_kind: str
    origin: str


class MirrorResult(msgspec.Struct, frozen=True, kw_only=True):
    out: str
    pages: int
    written: int  # files whose bytes changed
    removed: int


def _origin(run: str | None, turn: str | None, artifact: str | None) -> str:
    if run:
        return f"run {run}" + (f" turn {turn}" if turn else "")
    return f"artifact {artifact}" if artifact else "-"


def read_memory(conn: sqlite3.Connection) -> tuple[list[Entity], list[Edge], list[Fact]]:
    entities = [
        Entity(scope=r[0], entity_id=r[1], name=r[2], kind=r[3] or "thing", aliases=tuple(msgspec.json.decode(r[4] or "[]")))
        for r in conn.execute(f"SELECT scope, entity_id, name, kind, aliases FROM {ENTITIES} WHERE forgotten = 0 ORDER BY scope, entity_id")
    ]
    edges = [
        Edge(id=r[0], scope=r[1], subject=r[2], predicate=r[3], object=r[4], text=r[5], review_state=r[6],
             provenance_kind=r[7] or "", origin=_origin(r[8], r[9], r[10]), extractor_version=r[11] or "",
             confidence=r[12], first_seen=r[13], last_seen=r[14], evidence_hash=r[15] or "", source_trust=r[16] or "")
        for r in conn.execute(
            "SELECT relationship_id, scope, subject, predicate, object, text, review_state, provenance_kind, "
            "origin_run, origin_turn, origin_artifact, extractor_version, confidence, first_seen, last_seen, "
            f"evidence_hash, source_trust FROM {RELATIONSHIPS} WHERE forgotten = 0 AND review_state != 'rejected' "
            "ORDER BY scope, subject, predicate, object, relationship_id"
        )
    ]
    facts = [
        Fact(id=r[0], scope=r[1], text=r[2], subject=r[3], review_state=r[4], stale=bool(r[5]),
             provenance_kind=r[6] or "", origin=_origin(r[7], r[8], r[9]))
        for r in conn.execute(
            "SELECT fact_id, scope, text, subject, review_state, stale, provenance_kind, origin_run, origin_turn, "
            f"origin_artifact FROM {FACTS} WHERE forgotten = 0 AND review_state != 'rejected' ORDER BY scope, text, fact_id"
        )
    ]
    # Sorted here too: the ORDER BYs follow the database's collation, Python's
    # order is the code points' on both databases (SQLite's BINARY, for UTF-8).
    entities.sort(key=lambda e: (e.scope, e.entity_id))
    edges.sort(key=lambda e: (e.scope, e.subject, e.predicate, e.object, e.id))
    facts.sort(key=lambda f: (f.scope, f.text, f.id))
    return entities, edges, facts


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# What lets text from memory (a gateway's, through `memory.remember`) change a
# page's structure rather than sit in it: raw HTML and autolinks (`<`), links and
# images (`[`, `]`), the escape itself, and a block marker where the text starts.
# Emphasis and the like only change how the text looks, and are left as written.
_STRUCTURAL = re.compile(r"[\\<\[\]]")
_LEADING_MARKER = re.compile(r"^(?:([#>+=*_`~-])|(\d{1,9})([.)]))")


def _md(text: str) -> str:
    """`text` as one run of markdown text: line breaks and other control characters
    shown as escapes (gormes/printable.py), so it cannot start a line of its own
    (a heading, a fact without its unreviewed mark), and no HTML, link or image."""
    text = _STRUCTURAL.sub(lambda m: "\\" + m.group(), printable(text))
    return _LEADING_MARKER.sub(lambda m: "\\" + m.group(1) if m.group(1) else f"{m.group(2)}\\{m.group(3)}", text)


def _code(text: str) -> str:
    """`text` as a code span: fenced by one backtick more than its longest run."""
    text = printable(text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _mark(state: str) -> str:
    return " _(unreviewed)_" if state == "unreviewed" else ""


SLUG_MAX = 100  # characters of a name kept in a file name (file systems allow 255 bytes)


def _slug(text: str) -> str:
    """A file name for `text`: its ASCII letters, digits and `._-`, the rest `_`. A
    long name, or one with no ASCII letter or digit (which would all read `_` and
    share a page), is cut and told apart by a digest of the whole name."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", text)
    if len(slug) > SLUG_MAX or not re.search(r"[A-Za-z0-9]", slug):
        return f"{slug[:SLUG_MAX // 2]}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"
    return slug


def entity_path(entity: Entity) -> str:
    return f"{ENTITY_DIR}/{_slug(entity.scope)}/{_slug(entity.entity_id)}.md"


def render_user(entities: list[Entity], facts: list[Fact]) -> str:
    lines = ["# Memory", "", "Generated by `gormes memory mirror` from the memory projection. Do not edit.", ""]
    scopes = sorted({e.scope for e in entities} | {f.scope for f in facts})
    for scope in scopes:
        lines += [f"## {_md(scope)}", "", "### Entities", ""]
        lines += [f"- [{_md(e.name)}]({entity_path(e)}) ({_md(e.kind)})" for e in entities if e.scope == scope] or ["- (none)"]
        lines += ["", "### Facts", ""]
        lines += [_fact_line(f) for f in facts if f.scope == scope] or ["- (none)"]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _fact_line(f: Fact) -> str:
    return f"- {_md(f.text)}{' _(stale)_' if f.stale else ''}{_mark(f.review_state)} — {_md(f.provenance_kind)}, {_md(f.origin)}"


def render_entity(entity: Entity, names: dict[str, str], edges: list[Edge], facts: list[Fact]) -> str:
    lines = [f"# {_md(entity.name)}", "", f"- id: {_code(entity.entity_id)}", f"- scope: {_md(entity.scope)}",
             f"- kind: {_md(entity.kind)}"]
    if entity.aliases:
        lines.append(f"- aliases: {', '.join(_md(a) for a in entity.aliases)}")
    lines += ["", "## Relationships", ""]
    for e in edges:
        subject, object_ = _md(names.get(e.subject, e.subject)), _md(names.get(e.object, e.object))
        lines += [
            f"- {subject} —{_md(e.predicate)}→ {object_}{_mark(e.review_state)}",
            f"  - id: {_code(e.id)}, review: {e.review_state}, provenance: {_md(e.provenance_kind)}, "
            f"trust of source: {_md(e.source_trust)}",
            f"  - origin: {_md(e.origin)}, extractor: {_md(e.extractor_version or '-')}, confidence: {e.confidence:.2f}",
            f"  - first seen {_when(e.first_seen)}, last seen {_when(e.last_seen)}, evidence sha256 {e.evidence_hash[:16]}",
        ]
    if not edges:
        lines.append("- (none)")
    lines += ["", "## Facts", ""]
    lines += [_fact_line(f) for f in facts] or ["- (none)"]
    return "\n".join(lines) + "\n"


def render_pages(entities: list[Entity], edges: list[Edge], facts: list[Fact]) -> dict[str, str]:
    """Relative path -> page text, for every page of the mirror."""
    names: dict[tuple[str, str], str] = {(e.scope, e.entity_id): e.name for e in entities}
    edges_of: dict[tuple[str, str], list[Edge]] = defaultdict(list)
    for edge in edges:
        edges_of[(edge.scope, edge.subject)].append(edge)
        if edge.object != edge.subject:
            edges_of[(edge.scope, edge.object)].append(edge)
    facts_of: dict[tuple[str, str], list[Fact]] = defaultdict(list)
    for fact in facts:
        if fact.subject:
            facts_of[(fact.scope, fact.subject)].append(fact)
    pages = {USER_PAGE: render_user(entities, facts)}
    for entity in entities:
        key = (entity.scope, entity.entity_id)
        scoped = {eid: name for (scope, eid), name in names.items() if scope == entity.scope}
        pages[entity_path(entity)] = render_entity(entity, scoped, edges_of.get(key, []), facts_of.get(key, []))
    return pages


def write_mirror(pages: dict[str, str], out: Path) -> MirrorResult:
    written = removed = 0
    for rel, text in sorted(pages.items()):
        path = out / rel
        data = text.encode()
        if path.is_file() and path.read_bytes() == data:
            continue
        write_under(out, rel, data)  # no symlink, FIFO or device under `out` is written through
        written += 1
    entity_root = out / ENTITY_DIR
    if entity_root.is_dir() and not entity_root.is_symlink():
        for stale in sorted(entity_root.rglob("*.md")):
            if stale.relative_to(out).as_posix() not in pages:
                stale.unlink()
                removed += 1
    return MirrorResult(out=str(out), pages=len(pages), written=written, removed=removed)


def mirror(conn: sqlite3.Connection, out: Path) -> MirrorResult:
    return write_mirror(render_pages(*read_memory(conn)), out)


async def mirror_store(store: EventStore, out: Path) -> MirrorResult:
    """`mirror` of what a store's memory holds: its `memory` projection is caught up
    with the log first (`gormes memory mirror`)."""
    await ProjectionRunner(store, memory_projection).catch_up(upto=await store.head())
    return await store.read_sql(lambda conn: mirror(conn, out))
