"""Copies of `scale_template.py`'s unit, with fresh ids, written as a migration writes rows.

Copy k of the template is the same events with:

- every id replaced (ULID-like job and run ids, `f_`/`r_`/`e_` memory ids) by one
  made of k and the id's number in the template (a ULID keeps its time part), the
  same way in stream names and in data, so a copy's children, parents and tool
  calls point at its own runs;
- the memory scope `project:default` made `project:p<k>` (one project's memory
  per copy: recall in one scope reads that scope);
- times moved back by (copies - 1 - k) x `step_s` seconds (the last copy is the
  template's own time): `recorded_at` of every event and the clock fields of the
  job, memory and audit events. A run's events keep theirs, as a replay compares
  the requests a run made with the hashes recorded then, and a tool's result
  (the clock's, say) is in the next request;
- the audit records sealed again into the hash chain of the day they now fall
  on (gormes/events/audit_chain.py), so the doctor's chain check holds.

Rows go in through the store's own migration path (`WriteBatch.append_rows`: the
rows as stored, at the positions they carry), many copies per transaction, with
no inline projection: `gormes projections rebuild` builds every read model after.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from gormes.events.audit import OperationAudited, audit_stream
from gormes.events.audit_chain import GENESIS, sealed
from gormes.events.codec import default_codec
from gormes.events.sqlite_log import SQLiteLog, WriteBatch

SCOPE = "project:default"
_IDS = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}|\b[a-z]_[0-9a-f]{16}\b|project:default")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# Clock fields of job, memory and audit events: milliseconds above 1e11, else seconds.
_CLOCK_KEYS = frozenset({
    "at", "created_at", "lock_until", "delay_until", "observed_at", "first_seen", "last_seen",
    "sent_at", "read_at",
})
_SHIFTED = ("job.", "memory.", "audit.")
COPIES_PER_TRANSACTION = 50

Row = tuple[int, str, int, str, int, str, float]


def _b32(n: int, width: int) -> str:
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(width)))


class Ids:
    """Every id of the template, numbered in sorted order: copy k of the i-th is
    unique to (k, i) and keeps the id's shape (a ULID keeps its time part)."""

    def __init__(self, rows: list[Row]) -> None:
        found = {m.group(0) for row in rows for text in (row[1], row[5]) for m in _IDS.finditer(text)}
        self.index = {token: i for i, token in enumerate(sorted(found - {SCOPE}))}

    def renamer(self, k: int) -> Callable[[str], str]:
        """Text -> the same text with copy k's ids and scope."""
        index, scope, b32, hex6 = self.index, f"project:p{k}", _b32(k, 6), f"{k:06x}"

        def one(m: re.Match[str]) -> str:
            token = m.group(0)
            if token == SCOPE:
                return scope
            i = index[token]
            if len(token) == 26:
                return token[:10] + b32 + _b32(i, 10)
            return f"{token[:2]}{hex6}{i:010x}"

        return lambda text: _IDS.sub(one, text)


def _shift(value: Any, seconds: float) -> Any:
    if isinstance(value, dict):
        return {
            key: (_moved(v, seconds) if key in _CLOCK_KEYS else _shift(v, seconds))
            for key, v in value.items()
        }
    if isinstance(value, list):
        return [_shift(v, seconds) for v in value]
    return value


def _moved(value: Any, seconds: float) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _shift(value, seconds)
    if value > 1e11:
        return value + int(seconds * 1000)
    return value + seconds


def read_template(path: Path) -> list[Row]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT position, stream, version, type, type_version, data, recorded_at"
            " FROM events ORDER BY position"
        ).fetchall()
    finally:
        conn.close()


class Replicator:
    """Writes copies of the template rows into one log, tracking stream versions
    and each audit day's chain head across copies."""

    def __init__(self, template: list[Row], copies: int, step_s: float) -> None:
        self.template = template
        self.ids = Ids(template)
        self.copies = copies
        self.step_s = step_s
        self.versions: dict[str, int] = {}
        self.heads: dict[str, str] = {}  # audit day stream -> digest of its last record
        self.position = 0

    def rows_of(self, k: int) -> list[Row]:
        rename = self.ids.renamer(k)
        offset = -(self.copies - 1 - k) * self.step_s
        out: list[Row] = []
        for _, stream, _, type_, tv, data, recorded_at in self.template:
            data = rename(data)
            stream = rename(stream)
            if offset and type_.startswith(_SHIFTED):
                data = msgspec.json.encode(_shift(msgspec.json.decode(data), offset)).decode()
            if type_ == "audit.operation":
                stream, data = self._seal(data)
            version = self.versions.get(stream, 0) + 1
            self.versions[stream] = version
            self.position += 1
            out.append((self.position, stream, version, type_, tv, data, recorded_at + offset))
        return out

    def _seal(self, data: str) -> tuple[str, str]:
        event = msgspec.json.decode(data, type=OperationAudited)
        stream = audit_stream(event.at)
        version = self.versions.get(stream, 0) + 1
        event = sealed(event, stream, version, self.heads.get(stream, GENESIS))
        self.heads[stream] = event.digest
        _, _, text = default_codec.encode(event)
        return stream, text

    def write(self, path: Path, on_progress: Callable[[int], None] = lambda k: None) -> int:
        log = SQLiteLog(path, durability="normal")
        try:
            for start in range(0, self.copies, COPIES_PER_TRANSACTION):
                def fill(batch: WriteBatch, start: int = start) -> None:
                    for k in range(start, min(start + COPIES_PER_TRANSACTION, self.copies)):
                        batch.append_rows(self.rows_of(k))
                log.write_now(fill)
                on_progress(min(start + COPIES_PER_TRANSACTION, self.copies))
        finally:
            log.close()
        return self.position
