"""Parking a job: pause it while it waits for a decision, resume it on the decision.

A job whose work cannot go on until someone decides something (an approval, a
budget raised) is PARKED instead of holding its worker: its holder pauses it, with
a transcript entry naming what it waits for (`data={"parked_on": KEY}`), in one
transaction. The pause releases the lease (the job machine's `job.paused` unlocks
it), and the worker, which watches for pauses, cancels the handler: no worker is
held while the job waits. Whoever makes the decision resumes the job in the
transaction that records it (`unpark_in`, or `unpark_all_in` for every job
parked on one key); the job goes back to `waiting` and its next attempt carries
on (an `agent` job resumes its run from the record: decision 0011).

No wake-up is lost: the parker checks that the decision has not been made in the
same transaction that parks (`park(..., decided=...)`), and the decider resumes
in the transaction that decides, so one of the two always sees the other.

A job parked on KEY is resumed only by a decision on KEY: a job an operator
paused for other reasons (no parked entry right before its pause), or parked on
another key, is left as it is.

    decision = await park(store, now_ms, job_id, lock_token, on="approval-01J...",
                          why="waiting for approval 01J...", decided=read_decision)
    ...
    await store.transact(lambda tx: unpark_in(tx, now_ms, job_id, on="approval-01J..."))

Keys are the decider's business: the approval gates use `approval-<id>`
(gormes/actors/runs/approvals.py, decision 0033).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gormes.actors.jobs import rules
from gormes.actors.jobs.session import JobSession
from gormes.events.base import Recorded
from gormes.events.jobs import JobPaused, JobTranscribed, TranscriptEntry, job_stream
from gormes.events.store import EventStore, Transaction

PARKED_ON = "parked_on"  # the key of the transcript entry that names what a job waits for

T = TypeVar("T")


def park_in(tx: Transaction, now: int, job_id: str, token: str, *, on: str, why: str) -> None:
    """Park the job held by `token` on `on`, in `tx`: its transcript says why, then it
    is paused (lease released). `LockLost` if the token no longer holds it (nothing
    written), `InvalidTransition` if it cannot be paused."""
    s = JobSession(tx, now)
    entry = TranscriptEntry(kind="log", text=f"parked: {why}", data={PARKED_ON: on})
    s.run(job_id, rules.Transcribe(now=now, token=token, entry=entry))
    s.run(job_id, rules.Pause(now=now))


async def park(
    store: EventStore, now: int, job_id: str, token: str, *, on: str, why: str,
    decided: Callable[[Transaction], T | None],
) -> T | None:
    """In one transaction: `decided(tx)`; if it returns a decision, that is returned
    and nothing is written, else the job is parked (`park_in`) and None is returned."""

    def run(tx: Transaction) -> T | None:
        decision = decided(tx)
        if decision is None:
            park_in(tx, now, job_id, token, on=on, why=why)
        return decision

    return await store.transact(run)


def parked_on(records: Sequence[Recorded]) -> str | None:
    """What the job whose stream is `records` is parked on: the key of the parked
    entry appended right before its latest pause, if it is still paused."""
    for i in range(len(records) - 1, -1, -1):
        event = records[i].event
        if isinstance(event, JobPaused):
            before = records[i - 1].event if i > 0 else None
            if isinstance(before, JobTranscribed) and isinstance(before.entry.data, dict):
                key = before.entry.data.get(PARKED_ON)
                return key if isinstance(key, str) else None
            return None
        if event.type in ("job.resumed", "job.cancelled", "job.claimed"):
            return None
    return None


def unpark_in(tx: Transaction, now: int, job_id: str, *, on: str) -> bool:
    """Resume the job if it is paused and parked on `on`, in `tx`; True if it was."""
    s = JobSession(tx, now)
    state = s.state(job_id)
    if state is None or state.status != "paused":
        return False
    if parked_on(tx.read_stream(job_stream(job_id))) != on:
        return False
    s.run(job_id, rules.Resume(now=now))
    return True


def unpark_all_in(tx: Transaction, now: int, *, on: str) -> list[str]:
    """Resume every paused job parked on `on`, in `tx` (one key many jobs wait for,
    a budget say); returns their ids. Reads the paused jobs of the ledger."""
    paused: list[Any] = tx.execute("SELECT id FROM jobs WHERE status = 'paused' ORDER BY id").fetchall()
    return [row[0] for row in paused if unpark_in(tx, now, row[0], on=on)]
