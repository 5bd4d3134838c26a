"""Connections ended for flooding, as the store keeps them (decision 0081).

A gateway connection that keeps calling while refused is ended (`flooded`,
gormes/control/call_rate.py, decision 0072's addendum). Its client can start
`gormes mcp` again and flood again: each reconnection cost another window's
allowance of refusals, each an audit record. So the process that ends a
connection marks it in the store: one row of `rate_leases` under the key
`floods:gateway`, taken when it was ended (a lease of nothing: `tokens` 0, sent).
The marks are shared as the calls' leases are, by every process on every host.

A new gateway connection's first limited call asks, in the look that finds the
class's window full (`latest_flood`): was a connection ended for flooding within
the last window? If so, the call is refused and the connection ends at its start,
told when to come back (`come_back_at`): the earlier of when the window frees
(the count-th latest lease of `calls:gateway` leaves it) and when the mark does.
A first call that finds its client's share full (decision 0082) asks the same.
Either way the state clears by itself; nothing is keyed on the client's name (a
client names itself), and a connection past its first call is never asked again.

Plain blocking functions over a transaction (`?` SQL), and one pure decision.
"""

from __future__ import annotations

from typing import Any

from gormes.control import limits_table as table

FLOODS_KEY = "floods:gateway"  # its key in `rate_leases`: a row per connection ended for flooding


def mark(tx: Any, mark_id: str, at: float, window_s: float) -> None:
    """Mark a connection ended for flooding at `at` (in a write transaction, the
    tables made). The marks older than a window go first, so the key holds the
    marks of one window at most: one per connection ended in it."""
    tx.execute(f"DELETE FROM {table.LEASES} WHERE key = ? AND at <= ?", (FLOODS_KEY, at - window_s))
    table.take_lease(tx, mark_id, FLOODS_KEY, at, 0, sent=True)


def latest_flood(tx: Any, now: float, window_s: float) -> float | None:
    """When the latest connection ended for flooding within the window was (one
    entry of `rate_leases_key_at`), or None."""
    row = tx.execute(f"SELECT at FROM {table.LEASES} WHERE key = ? AND at > ? ORDER BY at DESC LIMIT 1",
                     (FLOODS_KEY, now - window_s)).fetchone()
    return None if row is None else float(row[0])


def come_back_at(flooded_at: float, frees_at: float, window_s: float) -> float:
    """Pure: until when a connection that starts while a window is full (the class's,
    or its client's share's, decision 0082: it frees at `frees_at`) and a connection
    was ended for flooding at `flooded_at`, within the class's window `window_s`, is
    refused: the earlier of the window's freeing and the mark's leaving it."""
    return min(frees_at, flooded_at + window_s)
