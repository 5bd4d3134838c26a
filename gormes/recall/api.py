"""The recall API: ask the memory projection what it knows about a query.

    result = recall(conn, "where does ada work", mode="fused", k=5, scope="chat:42")
    for hit in result.hits:
        hit.text, hit.score, hit.scores.lexical, hit.why

    result = await recall_in_store(store, "ada", scope="chat:42")  # catches up first

Modes: `lexical` (full-text search over facts: FTS5 bm25 on SQLite, ts_rank_cd
on PostgreSQL), `graph` (entities matching the query
are seeds; relationships reached within two hops, and the facts about the
entities reached, scored by seed strength, hop decay and how recently they were
last seen), `semantic` (sentence embeddings, only with the `gormes[semantic]`
extra installed; otherwise disabled and SAID so in `modes` and `notes`), and
`fused` (reciprocal-rank fusion of every available mode). Each hit carries its
score in every mode that found it (`scores`) and why it was selected (`why`:
which mode, which terms, which seed and which path).

Privacy (scopes). A query runs in one scope (`chat:<id>` or `project:<id>`) and
sees that scope's memory only. `cross_scope=True` widens it to every scope, but
only for trust classes in `CROSS_SCOPE_TRUST` (the operator: a person at the
local CLI). Gateway callers, child agents and system jobs (cron and the daemon,
whose results reach chats) are refused with `CrossScopeDenied`, never silently
narrowed. Even when widened, items from other scopes count only if they are
trusted or promoted: unreviewed items (extracted from untrusted text) act only
in their own scope, rejected and forgotten items nowhere. Graph traversal obeys
the same rule edge by edge, so no path crosses into a scope it may not see.

The ranking itself is pure (gormes/recall/{lexical,graph,fused}.py take rows and
return scored candidates); this module only reads rows and assembles results.
"""

from __future__ import annotations

import sqlite3
from os import PathLike
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from gormes.errors import UserError
from gormes.events.memory import is_valid_scope
from gormes.projections.memory import memory_projection
from gormes.projections.runner import ProjectionRunner

if TYPE_CHECKING:
    from gormes.events.store import EventStore

Mode = Literal["lexical", "graph", "semantic", "fused"]
MODES: tuple[str, ...] = ("lexical", "graph", "semantic", "fused")
HitKind = Literal["fact", "relationship"]

DEFAULT_SCOPE = "project:default"
DEFAULT_K = 10
MAX_K = 1000
# A query is a question, not a document: as long as fs.grep's pattern. Every term
# of it is matched and scored, so a 10 MB query cost 1.8 s of CPU.
MAX_QUERY_CHARS = 2000
GRAPH_DEPTH = 2
CROSS_SCOPE_TRUST: frozenset[str] = frozenset({"operator"})


# -- errors --------------------------------------------------------------------------


class RecallError(UserError):
    """Bad recall input: one clear line, exit 2."""


class EmptyQuery(RecallError):
    """The query has no words to search for."""


class InvalidScope(RecallError):
    """A scope that is not `chat:<id>` or `project:<id>`."""


class CrossScopeDenied(RecallError):
    """The caller's trust class may not recall across scopes."""


# -- results -------------------------------------------------------------------------


class PathStep(msgspec.Struct, frozen=True, kw_only=True):
    """One relationship walked from a graph seed: `subject -[predicate]-> object`."""

    relationship_id: str
    subject: str
    predicate: str
    object: str
    scope: str


class Why(msgspec.Struct, frozen=True, kw_only=True):
    """Why one mode selected a hit."""

    mode: str
    reason: str  # one sentence for people
    matched_terms: tuple[str, ...] = ()  # lexical: query terms found in the text
    seed: str | None = None  # graph: the entity id the walk started from
    seed_name: str | None = None
    path: tuple[PathStep, ...] = ()  # graph: the relationships walked, seed first
    depth: int | None = None  # graph: hops from the seed (0: a fact about the seed)


class ModeScore(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    score: float  # higher is better, in that mode's own units
    rank: int  # 1-based rank in that mode's list
    # lexical: the function behind `score`, which differs by database: "bm25"
    # (SQLite FTS5, negated) or "ts_rank_cd" (PostgreSQL); not comparable numbers
    ranking: str | None = None


class ScoreBreakdown(msgspec.Struct, frozen=True, kw_only=True):
    """The hit's score in each mode that found it; None where a mode did not (or was off)."""

    lexical: ModeScore | None = None
    graph: ModeScore | None = None
    semantic: ModeScore | None = None
    fused: ModeScore | None = None


class RecallHit(msgspec.Struct, frozen=True, kw_only=True):
    id: str  # fact id or relationship id
    kind: HitKind
    text: str  # the fact, or "subject predicate object" for a relationship
    scope: str
    review_state: str
    score: float  # in the requested mode (for fused: the RRF score)
    scores: ScoreBreakdown
    why: tuple[Why, ...]
    subject: str | None = None
    last_seen: float = 0.0
    stale: bool = False  # a fact superseded by a newer one
    provenance_kind: str = ""
    origin: str = ""  # Origin.describe() of its provenance


class ModeStatus(msgspec.Struct, frozen=True, kw_only=True):
    mode: str
    enabled: bool
    reason: str = ""  # why it is disabled


class RecallResult(msgspec.Struct, frozen=True, kw_only=True):
    query: str
    mode: str
    k: int
    scope: str
    cross_scope: bool
    scopes: tuple[str, ...]  # scopes whose items could appear ("*" when cross-scope)
    hits: tuple[RecallHit, ...]
    modes: tuple[ModeStatus, ...]  # every mode consulted, enabled or not
    notes: tuple[str, ...] = ()  # e.g. "semantic: disabled, <reason>"


# -- checks --------------------------------------------------------------------------


def check_request(query: str, *, mode: str, k: int, scope: str, cross_scope: bool, trust: str) -> str:
    """Validate a request; the query with its whitespace normalised."""
    from gormes.recall.lexical import query_terms

    text = " ".join(query.split())
    if not text or not query_terms(text):
        raise EmptyQuery("recall: the query is empty (give some words to search for)")
    if mode not in MODES:
        raise RecallError(f"recall: unknown mode {mode!r} (known: {', '.join(MODES)})")
    if not 1 <= k <= MAX_K:
        raise RecallError(f"recall: k must be between 1 and {MAX_K}, got {k}")
    if not is_valid_scope(scope):
        raise InvalidScope(f"recall: scope {scope!r} is not chat:<id> or project:<id>")
    if cross_scope and trust not in CROSS_SCOPE_TRUST:
        raise CrossScopeDenied(
            f"recall: a {trust!r} caller may not recall across scopes (only: {', '.join(sorted(CROSS_SCOPE_TRUST))})"
        )
    return text


# -- entry points --------------------------------------------------------------------


def recall(
    db: sqlite3.Connection | Any | str | PathLike[str],
    query: str,
    *,
    mode: Mode | str = "fused",
    k: int = DEFAULT_K,
    scope: str = DEFAULT_SCOPE,
    cross_scope: bool = False,
    trust: str = "operator",
    now: float | None = None,
) -> RecallResult:
    """Recall from a database whose `memory` projection is built.

    `db`: a sqlite3 connection, a sqlite_utils.Database, a path, or a PostgreSQL
    PortableConnection. `now` is the
    reference time for the last-seen decay; by default the newest `last_seen`
    among the relationships considered, so results do not change with the clock.
    Raises `RecallError` (a UserError) for bad input.
    """
    from gormes.recall.engine import run_recall

    text = check_request(query, mode=mode, k=k, scope=scope, cross_scope=cross_scope, trust=trust)
    conn, owned = _connection(db)
    try:
        return run_recall(conn, text, mode=mode, k=k, scope=scope, cross_scope=cross_scope, now=now)
    finally:
        if owned:
            conn.close()


async def recall_in_store(
    store: EventStore,
    query: str,
    *,
    mode: Mode | str = "fused",
    k: int = DEFAULT_K,
    scope: str = DEFAULT_SCOPE,
    cross_scope: bool = False,
    trust: str = "operator",
    now: float | None = None,
) -> RecallResult:
    """`recall` over a store: brings the `memory` projection up to the log's head
    first (read-your-writes), then reads in a worker thread."""
    check_request(query, mode=mode, k=k, scope=scope, cross_scope=cross_scope, trust=trust)
    await ProjectionRunner(store, memory_projection).catch_up(upto=await store.head())
    return await store.read_sql(
        lambda conn: recall(conn, query, mode=mode, k=k, scope=scope, cross_scope=cross_scope,
                            trust=trust, now=now)
    )


def _connection(db: Any) -> tuple[sqlite3.Connection, bool]:
    if isinstance(db, sqlite3.Connection) or getattr(db, "dialect", None) == "postgres":
        return db, False  # an sqlite3 connection or a PortableConnection
    conn = getattr(db, "conn", None)  # sqlite_utils.Database, SQLiteLog
    if isinstance(conn, sqlite3.Connection):
        return conn, False
    uri = f"file:{PathLike.__fspath__(db) if isinstance(db, PathLike) else db}?mode=ro"
    try:
        return sqlite3.connect(uri, uri=True, check_same_thread=False), True
    except sqlite3.OperationalError as exc:
        raise RecallError(f"recall: cannot open {db}: {exc}") from None
