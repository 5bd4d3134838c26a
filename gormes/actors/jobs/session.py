"""One queue command inside one store transaction: fold, decide, append, follow up.

A `JobSession` lives for one `store.transact` call, in the writer thread. It folds
each job's stream once (then keeps the state current as it appends), runs the
pure `decide`, appends with the expected version, and carries out what a
terminal transition implies for the parent in the same transaction: the child's
tokens rolled up (whatever its outcome) and a `child_done` in the parent's inbox, with
the parent's own reaction (fail_parent, settled) and so on up the tree.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gormes.actors.actor import State, fold
from gormes.actors.jobs.actor import JOB
from gormes.actors.jobs.rules import AddTokens, Command, NotifyChildDone, outcome_of
from gormes.actors.jobs.state import JobState
from gormes.actors.runtime import execute, load
from gormes.events.base import Event
from gormes.events.jobs import Tokens, job_stream

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class IdGenerator:
    """ULID-like ids: 48 bits of milliseconds then 80 random bits, Crockford base32,
    26 characters; sortable, and strictly increasing within one process."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last = 0

    def __call__(self) -> str:
        with self._lock:
            ms = int(self._clock() * 1000) & ((1 << 48) - 1)
            value = (ms << 80) | int.from_bytes(os.urandom(10), "big")
            if value <= self._last:
                value = self._last + 1
            self._last = value
        out = []
        for _ in range(26):
            out.append(_CROCKFORD[value & 31])
            value >>= 5
        return "".join(reversed(out))


new_id = IdGenerator()


class JobSession:
    def __init__(self, tx: Any, now: int, ids: Callable[[], str] = new_id) -> None:
        self.tx = tx
        self.now = now
        self.ids = ids
        self._states: dict[str, State[JobState | None]] = {}
        self.appends = 0  # how many appends this session made (to tell if it wrote)

    # -- reading ---------------------------------------------------------------

    def state(self, job_id: str) -> JobState | None:
        return self._state(job_id).value

    def _state(self, job_id: str) -> State[JobState | None]:
        known = self._states.get(job_id)
        if known is None:
            known = self._states[job_id] = load(self.tx, JOB, job_id)
        return known

    def known(self, job_id: str) -> JobState | None:
        """The job's state as this session has it, if it folded or was told it."""
        known = self._states.get(job_id)
        return None if known is None else known.value

    def preload(self, job_ids: Sequence[str]) -> None:
        """Fold many jobs' streams with one read (what `state` would fold, one by one)."""
        missing = [job_id for job_id in job_ids if job_id not in self._states]
        read_streams = getattr(self.tx, "read_streams", None)
        if len(missing) < 2 or read_streams is None:
            for job_id in missing:
                self.state(job_id)
            return
        streams = read_streams([job_stream(job_id) for job_id in missing])
        for job_id in missing:
            self._states[job_id] = fold(JOB, [r.event for r in streams[job_stream(job_id)]])

    def know(self, states: Iterable[JobState]) -> None:
        """Take states folded in an earlier transaction (a claim's, a renewal's), so
        that `state` and `preload` need not fold those jobs' whole streams again:
        one whose stream has not moved is taken as it is; the others are brought
        up to date by folding only the events after them, all with one read
        (an agent job appends `job.tokens_added` every turn, so a kept state is
        stale by the next renewal; decision 0025)."""
        behind: dict[str, State[JobState | None]] = {}  # by job id
        for state in states:
            if state.id in self._states:
                continue
            version = self.tx.stream_version(job_stream(state.id))
            if version == state.version:
                self._states[state.id] = State(state.version, state)
            elif version > state.version:
                behind[state.id] = State(state.version, state)
            # (a stream shorter than the state lost events: folded whole when asked)
        if not behind:
            return
        after = {job_stream(job_id): kept.version for job_id, kept in behind.items()}
        read_streams = getattr(self.tx, "read_streams", None)
        if read_streams is None:
            tails = {stream: self.tx.read_stream(stream, v) for stream, v in after.items()}
        else:
            tails = read_streams(list(after), after=after)
        for job_id, kept in behind.items():
            self._states[job_id] = fold(JOB, [r.event for r in tails[job_stream(job_id)]], kept)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.tx.execute(sql, params).fetchall()

    def ids_where(self, sql: str, params: Sequence[Any] = ()) -> list[str]:
        return [row[0] for row in self.rows(sql, params)]

    # -- writing ---------------------------------------------------------------

    def run(self, job_id: str, command: Command) -> list[Event]:
        """Decide `command` for the job, append what was decided, follow up."""
        before = self._state(job_id)
        events, after = execute(self.tx, JOB, job_id, command, before)
        if not events:
            return []
        self.appends += 1
        self._states[job_id] = after
        job = after.value
        assert job is not None
        if job.terminal and (before.value is None or not before.value.terminal):
            self._notify_parent(job)
        return list(events)

    def _notify_parent(self, child: JobState) -> None:
        parent_id = child.options.parent_id
        if parent_id is None:
            return
        parent = self.state(parent_id)
        if parent is None or parent.terminal or child.id not in parent.live_children:
            return
        # Whatever the child's outcome: a failed, dead or cancelled child spent its
        # tokens too (decision 0035).
        if child.tokens != Tokens():
            self.run(parent_id, AddTokens(
                now=self.now, token=None, tokens=child.tokens, from_child=child.id
            ))
        self.run(parent_id, NotifyChildDone(
            now=self.now, message_id=self.ids(), child_id=child.id,
            outcome=outcome_of(child) or "failed", result=child.result, error=child.error,
            policy=child.options.on_child_fail,
        ))
