"""The shared tables of the provider limits: a row per limit key and the rate leases.

The gateways' call limit (gormes/control/call_rate.py, decision 0072) takes its
leases here too, under the key `calls:gateway`, with no row in `provider_limits`
(it has no outage or back-off, and is no provider's).

Like worker heartbeats (decision 0006) these are rows, not events: a lease per
model turn would be millions of events that say nothing happened, and they are
not replayable history (a replay never calls a provider). Both are written only
inside a store transaction: SQLite's `BEGIN IMMEDIATE` serializes every writer of
the file, PostgreSQL's writers hold the log's table lock, and the key's row is
read `FOR UPDATE` there as well, so a check and the lease it grants are one step
for every process on every host.

    SELECT key, failures, open_since, blocked_until FROM provider_limits
    SELECT key, count(*), sum(tokens) FROM rate_leases GROUP BY key
"""

from __future__ import annotations

from typing import Any

from gormes.control.outage import ProviderState
from gormes.events.postgres_sql import POSTGRES

LIMITS = "provider_limits"
LEASES = "rate_leases"
_FIELDS = ("key", "blocked_until", "blocked_reason", "failures", "open_since", "probe_holder",
           "probe_until", "last_error", "updated_at")

_CREATE = (
    f"""CREATE TABLE IF NOT EXISTS {LIMITS}(
    key TEXT PRIMARY KEY,
    blocked_until {{real}},
    blocked_reason TEXT,
    failures INTEGER NOT NULL DEFAULT 0,
    open_since {{real}},
    probe_holder TEXT,
    probe_until {{real}},
    last_error TEXT,
    updated_at {{real}} NOT NULL
)""",
    f"""CREATE TABLE IF NOT EXISTS {LEASES}(
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL,
    at {{real}} NOT NULL,
    tokens INTEGER NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0
)""",
    f"CREATE INDEX IF NOT EXISTS {LEASES}_key_at ON {LEASES}(key, at)",
)


def create(tx: Any) -> None:
    """Both tables in the dialect of `tx` (REAL is a float4 on PostgreSQL: seconds
    since the epoch would lose minutes)."""
    real = "DOUBLE PRECISION" if tx.dialect == POSTGRES else "REAL"
    for statement in _CREATE:
        tx.execute(statement.format(real=real))


def _state(row: tuple[Any, ...] | None, key: str) -> ProviderState:
    if row is None:
        return ProviderState(key=key)
    return ProviderState(**dict(zip(_FIELDS, row, strict=True)))


def read_state(conn: Any, key: str) -> ProviderState:
    """The key's row as it is (a read connection or a transaction)."""
    row = conn.execute(f"SELECT {', '.join(_FIELDS)} FROM {LIMITS} WHERE key = ?", (key,)).fetchone()
    return _state(row, key)


def lock_state(tx: Any, key: str) -> ProviderState:
    """The key's row inside a write transaction, made first if need be, and locked."""
    tx.execute(f"INSERT INTO {LIMITS}(key, updated_at) VALUES (?, ?) ON CONFLICT(key) DO NOTHING",
               (key, 0.0))
    lock = " FOR UPDATE" if tx.dialect == POSTGRES else ""
    row = tx.execute(f"SELECT {', '.join(_FIELDS)} FROM {LIMITS} WHERE key = ?{lock}", (key,)).fetchone()
    return _state(row, key)


def write_state(tx: Any, state: ProviderState) -> None:
    sets = ", ".join(f"{name} = ?" for name in _FIELDS[1:])
    tx.execute(f"UPDATE {LIMITS} SET {sets} WHERE key = ?",
               tuple(getattr(state, name) for name in _FIELDS[1:]) + (state.key,))


def window_leases(tx: Any, key: str, since: float, stale: float) -> list[tuple[float, int, bool]]:
    """The key's leases that still count, as (at, tokens, sent), oldest first: the
    ones whose request ended after `since`, and the ones in flight unless taken
    before `stale` (their process died); the others are deleted."""
    tx.execute(f"DELETE FROM {LEASES} WHERE key = ? AND ((sent = 1 AND at <= ?) OR at <= ?)",
               (key, since, stale))
    return [(at, tokens, bool(sent)) for at, tokens, sent in tx.execute(
        f"SELECT at, tokens, sent FROM {LEASES} WHERE key = ? ORDER BY at, id", (key,)).fetchall()]


def take_lease(tx: Any, lease_id: str, key: str, at: float, tokens: int, *, sent: bool = False) -> None:
    """A lease of `key` taken at `at`; `sent`: counted from `at` at once (a call
    limit's lease, which has no request in flight to settle)."""
    tx.execute(f"INSERT INTO {LEASES}(id, key, at, tokens, sent) VALUES (?, ?, ?, ?, ?)",
               (lease_id, key, at, tokens, int(sent)))


def latest_leases(tx: Any, key: str, since: float, n: int) -> float | None:
    """A call limit's look at `key` (its leases all sent, each counted from its
    `at`): the leases taken at or before `since` have left the window and are
    deleted; then the time of the `n`-th latest left, or None when fewer than
    `n` are (there is room). One index range (`rate_leases_key_at`), whatever
    the window holds: the limit needs no more than that one row."""
    tx.execute(f"DELETE FROM {LEASES} WHERE key = ? AND at <= ?", (key, since))
    row = tx.execute(f"SELECT at FROM {LEASES} WHERE key = ? ORDER BY at DESC LIMIT 1 OFFSET ?",
                     (key, n - 1)).fetchone()
    return None if row is None else float(row[0])


def delete_twins(tx: Any, key: str, since: float, suffix: str) -> None:
    """Delete the twins (id: the lease's id + `suffix`) of `key`'s leases taken at or
    before `since`, before those leases go: a client's share of the gateways' call
    rate (gormes/control/call_shares.py) is pruned by the class's look, whoever
    makes it, so a client that never calls again leaves no rows. One range of
    `rate_leases_key_at` (the leases leaving: one or none, a call at a time) and
    a primary-key entry each."""
    tx.execute(f"DELETE FROM {LEASES} WHERE id IN (SELECT id || ? FROM {LEASES} WHERE key = ? AND at <= ?)",
               (suffix, key, since))


def settle_lease(tx: Any, lease_id: str, ended_at: float, tokens: int | None) -> None:
    """The request ended by `ended_at` (so it left before: it counts one window
    from then on) and used `tokens` (None: unknown, the estimate stays)."""
    if tokens is None:
        tx.execute(f"UPDATE {LEASES} SET at = ?, sent = 1 WHERE id = ?", (ended_at, lease_id))
    else:
        tx.execute(f"UPDATE {LEASES} SET at = ?, tokens = ?, sent = 1 WHERE id = ?", (ended_at, tokens, lease_id))


def all_states(conn: Any) -> list[ProviderState]:
    """Every key's row (for doctor and top), by key."""
    return [_state(row, row[0]) for row in conn.execute(
        f"SELECT {', '.join(_FIELDS)} FROM {LIMITS} ORDER BY key").fetchall()]


def window_usage(conn: Any, since: float) -> dict[str, tuple[int, int]]:
    """Per key: (requests, tokens) leased after `since`."""
    return {key: (n, tokens or 0) for key, n, tokens in conn.execute(
        f"SELECT key, count(*), sum(tokens) FROM {LEASES} WHERE at > ? GROUP BY key", (since,)).fetchall()}
