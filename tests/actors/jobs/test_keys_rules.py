"""The rules of per-key concurrency and debounce (decision 0032), as properties.

- Debounce, pure: any run of submissions, at any gaps, folds (through `decide`)
  into jobs whose data, submission count and start time are what the rule says:
  a submission joins the pending job while it is in its window (and under its max
  wait), else starts the next one; the job starts `window` after its last
  submission, never later than `max wait` after its first.
- Options: what `validate_options` accepts is consistent (a limit has its key, a
  window its key, ...), and validating twice changes nothing.
- Claims on a real SQLite queue, random histories of submits (random keys and
  limits), claims, completions, failures and releases: no key ever has more jobs
  held than the limit of each job holding it, and a claim with room left behind
  it no job it could have taken.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gormes.actors.actor import fold
from gormes.actors.jobs import rules as r
from gormes.actors.jobs.actor import JOB
from gormes.actors.jobs.keys import pending_debounce
from gormes.actors.jobs.queue import JobQueue
from gormes.actors.jobs.state import InvalidJob, InvalidTransition, JobState
from gormes.events.jobs import MAX_COALESCED, JobOptions
from gormes.events.sqlite import SQLiteEventStore

T0 = 1_700_000_000_000


# -- debounce, pure ---------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    gaps=st.lists(st.integers(0, 9000), min_size=1, max_size=40),
    window=st.integers(1, 5000),
    most=st.none() | st.integers(0, 20_000),
    mode=st.sampled_from(["last", "merge"]),
)
def test_any_run_of_submissions_folds_into_the_jobs_the_rule_says(gaps, window, most, mode):
    options = r.validate_options(JobOptions(
        debounce_key="k", debounce_ms=window, debounce_mode=mode,
        debounce_max_ms=None if most is None else window + most,
    ))
    jobs: list[JobState] = []
    now = T0
    # the model: (first, last, datas) per job, written from the rule's words
    model: list[tuple[int, int, list[int]]] = []
    for i, gap in enumerate(gaps):
        now += gap
        current = jobs[-1] if jobs else None
        try:
            if current is None:
                raise InvalidTransition("no job yet")
            events = r.decide(current, r.Coalesce(now=now, data=i))
            jobs[-1] = fold(JOB, events, _state(current)).value
        except InvalidTransition:
            events = r.decide(None, r.Submit(now=now, job_id=f"j{i}", name="n", data=i, options=options))
            jobs.append(fold(JOB, events).value)
        first, last, datas = model[-1] if model else (None, None, [])
        due = None if first is None else min(
            last + window, first + options.debounce_max_ms if options.debounce_max_ms else last + window
        )
        if first is not None and now < due and len(datas) < MAX_COALESCED:
            model[-1] = (first, now, [*datas, i])
        else:
            model.append((now, now, [i]))
    assert len(jobs) == len(model)
    for job, (first, last, datas) in zip(jobs, model, strict=True):
        until = last + window if options.debounce_max_ms is None else min(last + window, first + options.debounce_max_ms)
        assert (job.created_at, job.delay_until, job.submissions) == (first, until, len(datas))
        assert job.data == (datas if mode == "merge" else datas[-1])
        assert job.status == "delayed"


def _state(job: JobState) -> Any:
    from gormes.actors.actor import State

    return State(job.version, job)


def test_a_job_that_took_the_most_submissions_takes_no_more():
    options = r.validate_options(JobOptions(debounce_key="k", debounce_ms=10**9))
    [submitted] = r.decide(None, r.Submit(now=T0, job_id="j", name="n", options=options))
    job = fold(JOB, [submitted]).value
    full = msgspec.structs.replace(job, submissions=MAX_COALESCED)
    assert pending_debounce(job, T0 + 1) and not pending_debounce(full, T0 + 1)
    with pytest.raises(InvalidTransition):
        r.decide(full, r.Coalesce(now=T0 + 1, data=None))


# -- options ------------------------------------------------------------------------

MAYBE_KEY = st.none() | st.sampled_from(["", " ", "k", "tenant-1"])
MAYBE_MS = st.none() | st.integers(-10, 10_000)


@settings(max_examples=500, deadline=None)
@given(
    ckey=MAYBE_KEY, limit=st.none() | st.integers(-2, 5), dkey=MAYBE_KEY, window=MAYBE_MS,
    most=MAYBE_MS, mode=st.sampled_from(["last", "merge"]), delay=st.sampled_from([0, 50]),
)
def test_accepted_options_are_consistent_and_validating_again_changes_nothing(
    ckey, limit, dkey, window, most, mode, delay
):
    options = JobOptions(
        concurrency_key=ckey, concurrency_limit=limit, debounce_key=dkey, debounce_ms=window,
        debounce_max_ms=most, debounce_mode=mode, delay_ms=delay,
    )
    try:
        valid = r.validate_options(options)
    except InvalidJob:
        return
    assert r.validate_options(valid) == valid
    if valid.concurrency_key is None:
        assert valid.concurrency_limit is None
    else:
        assert valid.concurrency_key.strip() and valid.concurrency_limit >= 1
        assert valid.concurrency_limit == (limit or 1)
    if valid.debounce_key is None:
        assert (valid.debounce_ms, valid.debounce_max_ms, valid.debounce_mode) == (None, None, "last")
    else:
        assert valid.debounce_key.strip() and valid.debounce_ms >= 1 and valid.delay_ms == 0
        assert valid.debounce_max_ms is None or valid.debounce_max_ms >= valid.debounce_ms


# -- claims on a real queue ------------------------------------------------------------

LIMITS = {"a": 1, "b": 2, "c": 3}  # one limit per key here (each job's own: test_keys.py)
OP = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from([*LIMITS, None]), st.just(0), st.integers(-1, 1)),
    st.tuples(st.just("claim"), st.integers(1, 6), st.just(0), st.just(0)),
    st.tuples(st.sampled_from(["complete", "fail", "release", "pause"]), st.integers(0, 50),
              st.just(0), st.just(0)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OP, min_size=5, max_size=40))
def test_no_key_is_ever_held_past_its_limit_and_no_claimable_job_is_left_behind(ops):
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(_run_history, Path(tmp) / "keys.db", ops)


async def _run_history(path: Path, ops: list[tuple[str, Any, int, int]]) -> None:
    async with SQLiteEventStore.open(path) as store:
        queue = await JobQueue.open(store)
        held: dict[str, str] = {}  # job id -> lock token
        for op, x, _, priority in ops:
            if op == "submit":
                options: dict[str, Any] = {"priority": priority, "max_attempts": 2}
                if x is not None:
                    options |= {"concurrency_key": x, "concurrency_limit": LIMITS[x]}
                await queue.submit("w", None, options)
            elif op == "claim":
                got = await queue.claim_many({"w"}, limit=x)
                held |= {job.id: job.lock_token for job in got}
                if len(got) < x:  # room was left: nothing it could take is waiting
                    for job in await queue.list(status="waiting", limit=1000):
                        assert job.concurrency_key is not None, job
                        assert _held_of(await queue.list(status="active", limit=1000), job.concurrency_key) \
                            >= job.concurrency_limit, job
            elif held:
                job_id = sorted(held)[x % len(held)]
                token = held.pop(job_id)
                if op == "complete":
                    await queue.complete(job_id, token, None)
                elif op == "fail":
                    await queue.fail(job_id, token, "boom")
                elif op == "release":
                    await queue.release(job_id, token)
                else:
                    await queue.pause(job_id)
            active = await queue.list(status="active", limit=1000)
            for key, most in LIMITS.items():
                assert _held_of(active, key) <= most, (key, active)
            assert {job.id for job in active} == set(held)


def _held_of(active: list[Any], key: str) -> int:
    return sum(1 for job in active if job.concurrency_key == key)
