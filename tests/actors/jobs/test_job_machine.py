"""The job state machine is written once (gormes/events/job_machine.py), and both of
its folds agree: `evolve` into a JobState, the ledger into its rows.

Histories are made by the real rules: random commands go through `decide` (what it
refuses is skipped), a terminal child tells its parent as the queue's session does.
The events are folded by `evolve` and applied to the ledger on a real database
(an SQLite file; PostgreSQL when the test server is up), in random batches; after
each batch every field the ledger shows is compared with the folded state: the
job's row (as a Job, and the columns a Job leaves out), its inbox and transcript,
and whether it has a row at all. The ledger-only columns (`version`, `updated_at`)
and the removals are expected from the events, written here independently of
the table; a removed job keeps no inbox or transcript rows, even when its stream
goes on (a removed job retried, then told of a child's end). One fixed history
goes through every transition of the table.
"""

from __future__ import annotations

import dataclasses
import itertools
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gormes.actors.actor import State, fold
from gormes.actors.jobs import rules as r
from gormes.actors.jobs.actor import JOB
from gormes.actors.jobs.state import InvalidJob, InvalidTransition, JobState, LockLost
from gormes.actors.jobs.views import job_from_state, select_job
from gormes.events import job_machine as machine
from gormes.events.base import Recorded
from gormes.events.jobs import (
    POLICIES, JobChildDone, JobCompleted, JobEvent, JobFailed, JobInboxRead, JobLeaseRenewed,
    JobMessageSent, JobOptions, JobPruned, JobStalled, JobSubmitted, JobTimedOut,
    JobTokensAdded, JobTranscribed, Submitter, Tokens, TranscriptEntry, job_stream,
)
from gormes.projections import ledger, ledger_postgres

T0 = 1_700_000_000_000
GRACE_MS = 100

# Written here, not read from the table: what the ledger is expected to do with
# the columns only it has, and when it removes a job.
NO_ROW_WRITE = (JobTranscribed, JobMessageSent, JobInboxRead)  # `version` stays
UNSTAMPED = (JobLeaseRenewed, JobTokensAdded, *NO_ROW_WRITE)  # `updated_at` stays


def removes(event: Any, options: JobOptions) -> bool:
    """Whether `event` removes its job from the ledger."""
    if isinstance(event, JobPruned):
        return True
    if isinstance(event, JobCompleted):
        return options.remove_on_complete
    ends = (
        (isinstance(event, JobFailed) and event.status != "delayed")
        or (isinstance(event, JobStalled) and event.dead) or isinstance(event, JobTimedOut)
    )
    return ends and options.remove_on_fail


# -- making histories with the real rules ----------------------------------------------


class History:
    """Jobs driven by `decide`, their events recorded in append order."""

    def __init__(self) -> None:
        self.states: dict[str, State[JobState | None]] = {}
        self.records: list[Recorded] = []
        self.now = T0
        self.removed: set[str] = set()  # jobs the ledger has no row for now
        self._ids = itertools.count(1)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):04d}"

    def job_ids(self) -> list[str]:
        return list(self.states)

    def state(self, job_id: str) -> JobState | None:
        known = self.states.get(job_id)
        return None if known is None else known.value

    def run(self, job_id: str, command: r.Command) -> list[Any]:
        """Decide, check the table allows each event where it happens, record, follow up."""
        before = self.states.get(job_id, State(0, None))
        try:
            events = r.decide(before.value, command)
        except (InvalidJob, InvalidTransition, LockLost):
            return []
        after = before
        for event in events:
            t = machine.transition_of(event)
            assert t is not None, event
            job = after.value
            if t.follows is None:
                assert job is None, t.name
            else:
                assert job is not None and job.status in t.follows, (t.name, job and job.status)
            after = fold(JOB, [event], after)
            if after.value.lock_token is not None:  # a lease holds a job only where HELD says
                assert after.value.status in machine.HELD, (t.name, after.value.status)
            self.records.append(Recorded(
                len(self.records) + 1, job_stream(job_id), after.version,
                type(event).__struct_config__.tag, event, self.now / 1000,
            ))
            if removes(event, after.value.options):
                self.removed.add(job_id)
        self.states[job_id] = after
        job = after.value
        if events and job.terminal and (before.value is None or not before.value.terminal):
            self._notify_parent(job)
        return events

    def _notify_parent(self, child: JobState) -> None:
        """What the queue's session does when a child ends (gormes/actors/jobs/session.py)."""
        parent = self.state(child.options.parent_id) if child.options.parent_id else None
        if parent is None or parent.terminal or child.id not in parent.live_children:
            return
        if child.status == "completed" and child.tokens != Tokens():
            self.run(parent.id, r.AddTokens(
                now=self.now, token=None, tokens=child.tokens, from_child=child.id
            ))
        self.run(parent.id, r.NotifyChildDone(
            now=self.now, message_id=self.new_id("M"), child_id=child.id,
            outcome=r.outcome_of(child) or "failed", result=child.result, error=child.error,
            policy=child.options.on_child_fail,
        ))

    # -- what a queue's caller can do --------------------------------------------------

    def submit(self, n: int, parent_id: str | None = None) -> str | None:
        # bit 15: debounced (decision 0032), merged when n is odd, with a max wait when n % 3 == 0
        debounced = bool(n >> 15 & 1) and parent_id is None
        options = r.validate_options(JobOptions(
            max_attempts=1 + n % 3, max_stalled=1 + (n >> 2) % 2,
            delay_ms=1000 if (n >> 3) % 4 == 3 and not debounced else 0,
            debounce_key=f"d{n % 3}" if debounced else None,
            debounce_ms=2000 if debounced else None,
            debounce_mode="merge" if debounced and n % 2 else "last",
            debounce_max_ms=3000 if debounced and n % 3 == 0 else None,
            concurrency_key=f"c{n % 2}" if n >> 4 & 1 else None,
            remove_on_complete=bool(n >> 5 & 1), remove_on_fail=bool(n >> 6 & 1),
            on_child_fail=POLICIES[(n >> 7) % len(POLICIES)],
            max_children=2 if (n >> 9) % 4 == 0 else None,
            timeout_ms=5000 if n >> 11 & 1 else None, parent_id=parent_id,
            queue="q1" if n >> 12 & 1 else "default", priority=n % 5,
            idempotency_key=f"k{n}" if n >> 13 & 1 else None,
        ))
        job_id = self.new_id("J")
        depth = 0
        if parent_id is not None:
            parent = self.state(parent_id)
            assert parent is not None
            try:  # the queue adds the child in the same transaction, or submits nothing
                r.decide(parent, r.AddChild(now=self.now, child_id=job_id))
            except InvalidJob:
                return None
            depth = parent.depth + 1
        submitter = Submitter(trust="operator", caller="cli") if n >> 14 & 1 else None
        self.run(job_id, r.Submit(
            now=self.now, job_id=job_id, name="job", data={"n": n}, options=options,
            depth=depth, submitter=submitter,
        ))
        if parent_id is not None:
            self.run(parent_id, r.AddChild(now=self.now, child_id=job_id))
        return job_id

    def token(self, job: JobState, n: int) -> str:
        return "stale" if n % 11 == 0 or job.lock_token is None else job.lock_token

    def act(self, action: str, job_id: str, n: int) -> None:
        """One caller's command to one job (`n` picks its details)."""
        job = self.state(job_id)
        assert job is not None
        now, token = self.now, self.token(job, n)
        if action == "child":
            self.submit(n, parent_id=job_id)
            return
        if action == "claim":
            if job_id in self.removed:  # a claim picks from the ledger's rows
                return
            command: r.Command = r.Claim(
                now=now, worker_id=f"w{n % 3}", lock_token=self.new_id("T"), lease_ms=1000 + n % 4000,
            )
        elif action == "stall":
            if job.lock_until is not None:
                self.now = now = max(now, job.lock_until + GRACE_MS + 1)
            command = r.CheckStall(now=now, grace_ms=GRACE_MS)
        elif action == "coalesce":
            command = r.Coalesce(now=now, data={"c": n}, submitter=job.submitter)
        elif action == "promote":
            self.now = now = max(now, job.delay_until or now)
            command = r.Promote(now=now)
        else:
            command = {
                "renew": lambda: r.Renew(now=now, token=token, lease_ms=500 + n % 3000),
                "complete": lambda: r.Complete(now=now, token=token, result={"r": n} if n % 3 else None),
                "fail": lambda: r.Fail(
                    now=now, token=token, error=f"boom {n}", unrecoverable=n % 5 == 0,
                    jitter_draw=(n % 100) / 100,
                ),
                "timeout": lambda: r.TimeOut(now=now, token=token if n % 2 else None),
                "release": lambda: r.Release(now=now, token=token, reason="shutdown"),
                "pause": lambda: r.Pause(now=now),
                "resume": lambda: r.Resume(now=now),
                "cancel": lambda: r.Cancel(now=now, reason=f"no {n}"),
                "retry": lambda: r.Retry(now=now),
                "prune": lambda: r.Prune(now=now),
                "progress": lambda: r.Progress(now=now, token=token, progress={"p": n % 100}),
                "tokens": lambda: r.AddTokens(now=now, token=token, tokens=Tokens(
                    input=n % 7, output=n % 11, cache_read=n % 3,
                )),
                "transcribe": lambda: r.Transcribe(now=now, token=token, entry=TranscriptEntry(
                    kind=("log", "tool_call", "llm_turn", "error")[n % 4], text=f"line {n}",
                    data={"d": n} if n % 2 else None,
                )),
                "message": lambda: r.SendMessage(
                    now=now, message_id=self.new_id("M"),
                    sender=job.options.parent_id if n % 3 == 0 and job.options.parent_id else "operator",
                    payload={"m": n},
                ),
                "read": lambda: r.ReadInbox(now=now, token=token),
                "settle": lambda: r.Settle(now=now),
            }[action]()
        self.run(job_id, command)


ACTIONS = (
    "child", "claim", "stall", "promote", "renew", "complete", "fail", "timeout", "release",
    "pause", "resume", "cancel", "retry", "prune", "progress", "tokens", "transcribe",
    "message", "read", "settle", "coalesce",
)
HOLDER_ACTIONS = frozenset({
    "renew", "complete", "fail", "timeout", "release", "progress", "tokens", "transcribe",
    "read", "stall",
})
# The jobs an action is most often meant for (the rules still decide; a move
# picks among all jobs now and then, or when none fits, to meet refusals too).
FITS: dict[str, Callable[[JobState], bool]] = {
    **{action: (lambda job: job.lock_token is not None) for action in HOLDER_ACTIONS},
    "claim": lambda job: job.status == "waiting",
    "promote": lambda job: job.status == "delayed",
    "coalesce": lambda job: job.status == "delayed" and job.options.debounce_key is not None,
    "resume": lambda job: job.status == "paused",
    "retry": lambda job: job.status in ("failed", "dead"),
    "prune": lambda job: job.terminal,
    "settle": lambda job: job.status == "waiting-children",
    "child": lambda job: not job.terminal,
    "message": lambda job: not job.terminal,
}


def history_of(moves: list[tuple[str, int, int]]) -> History:
    """Two root jobs, then each move: a new root job, or an action on one of the jobs."""
    h = History()
    h.submit(0)
    h.submit(1 << 9)
    for action, which, n in moves:
        h.now += 1 + n % 200
        if action == "submit":
            h.submit(n)
            continue
        ids = h.job_ids()
        fits = FITS.get(action)
        if fits is not None and n % 8:
            ids = [job_id for job_id in ids if fits(h.state(job_id))] or ids
        h.act(action, ids[which % len(ids)], n)
    return h


# -- what the ledger should show, from the events ------------------------------------


class Expected(NamedTuple):
    states: dict[str, JobState]
    removed: set[str]
    version: dict[str, int]
    updated_at: dict[str, int]
    inbox: dict[str, dict[str, tuple[Any, ...]]]  # job -> id -> (sender, payload, sent_at, read_at)
    transcript: dict[str, list[tuple[Any, ...]]]  # job -> (seq, kind, text, data, at)


def expected(records: list[Recorded]) -> Expected:
    folded: dict[str, State[JobState | None]] = {}
    out = Expected({}, set(), {}, {}, {}, {})
    for rec in records:
        job_id, e = rec.stream[4:], rec.event
        folded[job_id] = fold(JOB, [e], folded.get(job_id))
        state = folded[job_id].value
        assert state is not None
        out.states[job_id] = state
        inbox = out.inbox.setdefault(job_id, {})
        transcript = out.transcript.setdefault(job_id, [])
        if isinstance(e, JobSubmitted):
            out.updated_at[job_id] = e.created_at
        elif not isinstance(e, UNSTAMPED):
            out.updated_at[job_id] = e.at
        if not isinstance(e, NO_ROW_WRITE):
            out.version[job_id] = rec.version
        if job_id in out.removed:  # its stream goes on (a retry), but no row is written for it
            pass
        elif isinstance(e, JobMessageSent):
            inbox[e.message_id] = (e.sender, e.payload, e.at, None)
        elif isinstance(e, JobChildDone):
            payload = {
                "type": "child_done", "child_id": e.child_id, "outcome": e.outcome,
                "result": e.result, "error": e.error,
            }
            inbox[e.message_id] = (f"child:{e.child_id}", payload, e.at, None)
        elif isinstance(e, JobInboxRead):
            for message_id in e.message_ids:
                if message_id in inbox and inbox[message_id][3] is None:
                    inbox[message_id] = (*inbox[message_id][:3], e.at)
        elif isinstance(e, JobTranscribed):
            transcript.append((rec.version, e.entry.kind, e.entry.text, e.entry.data, e.at))
            del transcript[:-ledger.TRANSCRIPT_CAP]
        if removes(e, state.options):
            out.removed.add(job_id)
            inbox.clear()
            transcript.clear()
    return out


_json = msgspec.json.Decoder()


def _decoded(text: str | None) -> Any:
    return None if text is None else _json.decode(text)


def compare(conn: Any, want: Expected) -> None:
    """Every field the ledger shows, against the folded states and the events."""
    rows = {row[0] for row in conn.execute("SELECT id FROM jobs").fetchall()}
    assert rows == set(want.states) - want.removed
    for job_id, state in want.states.items():
        where = (job_id, state.status)
        inbox = {
            m: (sender, _decoded(payload), sent_at, read_at)
            for m, sender, payload, sent_at, read_at in conn.execute(
                "SELECT id, sender, payload, sent_at, read_at FROM inbox WHERE job_id = ?", (job_id,)
            ).fetchall()
        }
        assert inbox == want.inbox[job_id], where
        transcript = [
            (seq, kind, text, _decoded(data), at) for seq, kind, text, data, at in conn.execute(
                "SELECT seq, kind, text, data, at FROM transcript WHERE job_id = ? ORDER BY seq",
                (job_id,),
            ).fetchall()
        ]
        assert transcript == want.transcript[job_id], where
        if job_id in want.removed:
            continue
        assert select_job(conn, job_id) == job_from_state(state), where
        unread = {m for m, (_, _, _, read_at) in inbox.items() if read_at is None}
        assert unread == set(state.unread), where
        claimed_at, lease_ms, timeout_ms, version, updated_at = conn.execute(
            "SELECT claimed_at, lease_ms, timeout_ms, version, updated_at FROM jobs WHERE id = ?",
            (job_id,),
        ).fetchone()
        assert (claimed_at, lease_ms, timeout_ms) == (
            state.claimed_at, state.lease_ms, state.options.timeout_ms
        ), where
        assert (version, updated_at) == (want.version[job_id], want.updated_at[job_id]), where


def tables(conn: Any) -> dict[str, list[tuple[Any, ...]]]:
    return {
        "jobs": conn.execute("SELECT * FROM jobs ORDER BY id").fetchall(),
        "inbox": conn.execute("SELECT * FROM inbox ORDER BY id").fetchall(),
        "transcript": conn.execute("SELECT * FROM transcript ORDER BY job_id, seq").fetchall(),
    }


def check_both_folds(conn: Any, h: History, cuts: list[int]) -> None:
    """Apply `h` to the empty ledger in batches cut at `cuts`, comparing after each;
    then fold it again one event at a time: the same tables."""
    records = h.records
    bounds = sorted({0, len(records), *(c % (len(records) + 1) for c in cuts)})
    for start, end in itertools.pairwise(bounds):
        ledger.apply(conn, records[start:end])
        compare(conn, expected(records[:end]))
    batched = tables(conn)
    for table in batched:
        conn.execute(f"DELETE FROM {table}")
    for rec in records:
        ledger.apply_one(conn, rec)
    assert tables(conn) == batched


# -- the databases ----------------------------------------------------------------------


@contextmanager
def sqlite_ledger(path: Path) -> Iterator[Callable[[], Any]]:
    """`session()`: a connection on an SQLite file with the ledger's tables, inside a
    transaction that is rolled back afterwards (each example starts empty)."""
    ledger.setup_file(path)
    conn = sqlite3.connect(path, isolation_level=None)

    @contextmanager
    def session() -> Iterator[Any]:
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("ROLLBACK")

    try:
        yield session
    finally:
        conn.close()


@contextmanager
def postgres_ledger() -> Iterator[Callable[[], Any]]:
    import psycopg
    from pg_helpers import PG_URL, fresh_schema

    from gormes.events.postgres_sql import PortableConnection

    with fresh_schema() as schema, psycopg.connect(PG_URL) as raw:
        raw.execute(f'SET search_path TO "{schema}"')
        conn = PortableConnection(raw)
        ledger_postgres.set_up(conn, ledger.NAME, ledger.VERSION)
        raw.commit()

        @contextmanager
        def session() -> Iterator[Any]:
            try:
                yield conn
            finally:
                raw.rollback()

        yield session


@pytest.fixture(params=["sqlite", "postgres"])
def session(request, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    if request.param == "sqlite":
        with sqlite_ledger(tmp_path / "ledger.db") as session:
            yield session
    else:
        with postgres_ledger() as session:
            yield session


# -- the tests -------------------------------------------------------------------------


def tour() -> History:
    """One history through every transition of the table."""
    h = History()
    a = h.submit(4)  # waiting; two attempts, two stalls
    h.act("claim", a, 1)
    h.act("renew", a, 1)
    h.act("progress", a, 1)
    h.act("tokens", a, 1)
    h.act("transcribe", a, 1)
    h.act("message", a, 1)
    h.act("read", a, 1)
    h.act("release", a, 1)
    h.act("claim", a, 1)
    h.act("stall", a, 1)  # requeued
    h.act("claim", a, 1)
    h.act("stall", a, 1)  # dead at max_stalled
    h.act("retry", a, 1)
    h.act("claim", a, 1)
    h.act("fail", a, 1)  # delayed
    h.act("promote", a, 1)
    h.act("claim", a, 1)
    h.act("fail", a, 1)  # failed for good: dead
    h.act("prune", a, 1)
    p = h.submit(3 << 3)  # delayed
    h.act("pause", p, 1)
    h.act("resume", p, 1)
    h.act("claim", p, 1)
    kid = h.submit(0, parent_id=p)  # fail_parent: the parent fails with it
    h.act("complete", p, 1)  # awaiting children
    h.act("claim", kid, 1)
    h.act("timeout", kid, 1)
    assert h.state(p).status == "failed"
    q = h.submit(3 << 7)  # a parent whose children may fail (continue)
    h.act("claim", q, 1)
    other = h.submit(3 << 7, parent_id=q)
    h.act("release", q, 1)  # waiting-children, unlocked
    h.act("cancel", other, 1)  # continue: settled, waiting again
    h.act("claim", q, 1)
    h.act("complete", q, 1)
    h.act("cancel", h.submit(2), 1)
    done, dead = h.submit(1 << 5), h.submit(1 << 6)  # remove_on_complete, remove_on_fail
    h.act("claim", done, 1)
    h.act("complete", done, 1)
    h.act("claim", dead, 1)
    h.act("fail", dead, 5)  # unrecoverable
    assert {a, done, dead} <= h.removed
    last, merged = h.submit(1 << 15), h.submit(1 << 15 | 1)  # debounced: last, merge
    h.act("coalesce", last, 2)
    h.act("coalesce", merged, 3)
    assert h.state(merged).data == [{"n": 1 << 15 | 1}, {"c": 3}] and h.state(merged).submissions == 2
    return h


def test_the_table_names_every_job_event_and_every_status():
    from typing import get_args

    assert {t.event for t in machine.TRANSITIONS} == set(get_args(JobEvent))
    assert machine.CLAIMABLE == {"waiting"} and machine.TERMINAL.isdisjoint(machine.LIVE)
    assert machine.LIVE | machine.TERMINAL == set(machine.STATUSES)


def test_the_tour_goes_through_every_transition():
    seen = {machine.transition_of(rec.event) for rec in tour().records}
    assert seen == set(machine.TRANSITIONS), [t.name for t in set(machine.TRANSITIONS) - seen]


def test_the_tour_folds_alike_in_the_ledger(session):
    h = tour()
    with session() as conn:
        check_both_folds(conn, h, list(range(0, len(h.records), 3)))


MOVES = st.lists(
    # claims and the ends of an attempt come more often, cancels less
    st.tuples(st.sampled_from((
        "submit", *ACTIONS, *(a for a in ACTIONS if a != "cancel"),
        "claim", "claim", "complete", "fail",
    )), st.integers(0, 15),
              st.integers(0, 2**16 - 1)),
    min_size=20, max_size=120,
)
CUTS = st.lists(st.integers(0, 10_000), max_size=6)


def test_random_histories_fold_alike_in_state_and_ledger(session, request):
    examples = 200 if request.node.callspec.params["session"] == "sqlite" else 60

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(moves=MOVES, cuts=CUTS)
    def check(moves: list[tuple[str, int, int]], cuts: list[int]) -> None:
        h = history_of(moves)
        with session() as conn:
            check_both_folds(conn, h, cuts)

    check()


def test_a_wrong_fold_is_caught(session, monkeypatch):
    # given evolve that forgets one field of one transition (a stalled job's count)
    table = {t: t for t in machine.TRANSITIONS}
    stalled = next(t for t in table if t.event is JobStalled and t.when == ("dead", False))
    broken = dataclasses.replace(stalled, sets=stalled.sets[1:])

    def transition_of(event: Any) -> Any:
        found = machine.transition_of(event)
        return broken if found == stalled else found

    monkeypatch.setattr("gormes.actors.jobs.state.transition_of", transition_of)
    h = tour()
    # then the comparison with the ledger fails (compared after every event)
    with session() as conn, pytest.raises(AssertionError, match="J0001"):
        check_both_folds(conn, h, list(range(len(h.records))))
