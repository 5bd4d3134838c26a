"""The job state machine as given/when/then: pure decide and evolve, no trio, no I/O."""

from __future__ import annotations

from typing import Any

import pytest

from gormes.actors.jobs import rules as r
from gormes.actors.actor import fold
from gormes.actors.jobs.actor import JOB
from gormes.actors.jobs.state import InvalidJob, InvalidTransition, JobState, LockLost, evolve
from gormes.events.jobs import (
    Backoff, JobChildDone, JobChildrenSettled, JobCompleted,
    JobFailed, JobInboxRead, JobOptions, JobStalled, JobSubmitted, JobTimedOut,
)

T0 = 1_000_000


def given(*commands: r.Command) -> JobState | None:
    """Fold the events that `commands` decide, in order, from nothing."""
    state: JobState | None = None
    events: list[Any] = []
    for command in commands:
        new = r.decide(state, command)
        events.extend(new)
        state = fold(JOB, events).value
    return state


def submitted(**options: Any) -> r.Submit:
    return r.Submit(now=T0, job_id="J1", name="echo", data={"x": 1}, options=JobOptions(**options))


def claimed(token: str = "tok", now: int = T0 + 10, lease: int = 30_000) -> r.Claim:
    return r.Claim(now=now, worker_id="w1", lock_token=token, lease_ms=lease)


# -- submit ---------------------------------------------------------------------


def test_submit_without_delay_is_waiting():
    state = given(submitted())
    assert state is not None and state.status == "waiting" and state.version == 1


def test_submit_with_delay_is_delayed_until_due():
    state = given(submitted(delay_ms=500))
    assert state.status == "delayed" and state.delay_until == T0 + 500
    assert r.decide(state, r.Promote(now=T0 + 499)) == []
    [promoted] = r.decide(state, r.Promote(now=T0 + 500))
    assert evolve(state, promoted).status == "waiting"


@pytest.mark.parametrize("name", ["", "   ", "\t"])
def test_submit_refuses_empty_name(name):
    with pytest.raises(InvalidJob, match="name must not be empty"):
        r.decide(None, r.Submit(now=T0, job_id="J", name=name))


def test_unknown_option_is_refused_naming_it():
    with pytest.raises(InvalidJob, match="retries"):
        r.parse_options({"retries": 3})


@pytest.mark.parametrize("bad", [{"max_attempts": 0}, {"delay_ms": -1}, {"timeout_ms": 0}])
def test_out_of_range_options_are_refused(bad):
    with pytest.raises(InvalidJob):
        r.decide(None, r.Submit(now=T0, job_id="J", name="x", options=r.parse_options(bad)))


@pytest.mark.parametrize(("given_value", "kept"), [(0, 1), (5, 5), (1000, 100)])
def test_max_stalled_is_clamped(given_value, kept):
    [event] = r.decide(None, submitted(max_stalled=given_value))
    assert isinstance(event, JobSubmitted) and event.options.max_stalled == kept


# -- claim and fencing -------------------------------------------------------------


def test_claim_records_lock_lease_and_first_start():
    state = given(submitted(), claimed(now=T0 + 10, lease=1000))
    assert state.status == "active" and state.lock_token == "tok"
    assert state.lock_until == T0 + 1010 and state.attempts_started == 1
    assert state.started_at == T0 + 10


def test_a_second_claim_keeps_the_first_started_at():
    state = given(
        submitted(), claimed(), r.Release(now=T0 + 20, token="tok"),
        claimed(token="t2", now=T0 + 30),
    )
    assert state.started_at == T0 + 10 and state.attempts_started == 2
    assert state.attempts_made == 0  # a release consumes no attempt


def test_claim_refused_unless_waiting():
    state = given(submitted(), claimed())
    with pytest.raises(InvalidTransition):
        r.decide(state, claimed(token="other"))


@pytest.mark.parametrize("command", [
    r.Complete(now=T0, token="stale"),
    r.Fail(now=T0, token="stale", error="x"),
    r.Progress(now=T0, token="stale", progress=1),
    r.Renew(now=T0, token="stale", lease_ms=10),
    r.AddTokens(now=T0, token="stale", tokens=r.Tokens(input=1)),
    r.Transcribe(now=T0, token="stale", entry=r.TranscriptEntry(text="hi")),
    r.Release(now=T0, token="stale"),
    r.TimeOut(now=T0, token="stale"),
])
def test_every_holder_write_is_fenced_by_the_token(command):
    state = given(submitted(), claimed(token="tok"))
    with pytest.raises(LockLost):
        r.decide(state, command)


def test_wrong_token_reads_no_inbox():
    state = given(
        submitted(), r.SendMessage(now=T0, message_id="m1", sender="operator", payload=1),
        claimed(),
    )
    assert r.decide(state, r.ReadInbox(now=T0, token="wrong")) == []
    [read] = r.decide(state, r.ReadInbox(now=T0, token="tok"))
    assert isinstance(read, JobInboxRead) and read.message_ids == ("m1",)
    assert r.decide(evolve(state, read), r.ReadInbox(now=T0, token="tok")) == []


# -- failure and backoff -------------------------------------------------------------


@pytest.mark.parametrize(("attempt", "expected"), [(1, 1000), (2, 2000), (3, 4000)])
def test_exponential_backoff_without_jitter(attempt, expected):
    assert r.backoff_ms(Backoff(jitter=0.2), attempt, 0.5) == expected


def test_fixed_backoff_and_jitter_bounds():
    fixed = Backoff(kind="fixed", delay_ms=1000, jitter=0.2)
    assert r.backoff_ms(fixed, 3, 0.5) == 1000
    assert r.backoff_ms(fixed, 1, 0.0) == 800
    assert r.backoff_ms(fixed, 1, 0.999999) == 1200


def test_failure_with_attempts_left_is_delayed_by_recorded_backoff():
    state = given(submitted(max_attempts=3), claimed())
    [event] = r.decide(state, r.Fail(now=T0 + 100, token="tok", error="boom", jitter_draw=0.5))
    assert isinstance(event, JobFailed) and event.status == "delayed"
    assert event.backoff_ms == 1000 and event.delay_until == T0 + 1100
    after = evolve(state, event)
    assert after.status == "delayed" and after.attempts_made == 1 and after.lock_token is None


def test_failure_on_last_attempt_is_dead():
    state = given(
        submitted(max_attempts=2), claimed(),
        r.Fail(now=T0 + 1, token="tok", error="one"),
        r.Promote(now=T0 + 10_000), claimed(token="t2", now=T0 + 10_001),
    )
    [event] = r.decide(state, r.Fail(now=T0 + 10_002, token="t2", error="two"))
    assert event.status == "dead" and evolve(state, event).attempts_made == 2


def test_unrecoverable_failure_is_dead_at_once():
    state = given(submitted(max_attempts=10), claimed())
    [event] = r.decide(state, r.Fail(now=T0, token="tok", error="no", unrecoverable=True))
    assert event.status == "dead"


def test_timeout_is_dead_without_retry_and_consumes_an_attempt():
    state = given(submitted(max_attempts=5), claimed())
    [event] = r.decide(state, r.TimeOut(now=T0, token="tok"))
    assert isinstance(event, JobTimedOut)
    after = evolve(state, event)
    assert after.status == "dead" and after.error == "timeout exceeded" and after.attempts_made == 1


# -- stall ------------------------------------------------------------------------


def test_stall_needs_lease_expired_past_grace():
    state = given(submitted(), claimed(now=T0, lease=1000))
    assert r.decide(state, r.CheckStall(now=T0 + 1000 + 500, grace_ms=500)) == []
    [event] = r.decide(state, r.CheckStall(now=T0 + 1000 + 501, grace_ms=500))
    after = evolve(state, event)
    assert after.status == "waiting" and after.stalled_counter == 1 and after.attempts_made == 0


def test_stall_at_max_stalled_is_dead():
    state = given(
        submitted(max_stalled=2), claimed(now=T0, lease=10),
        r.CheckStall(now=T0 + 100, grace_ms=0), claimed(token="t2", now=T0 + 200, lease=10),
    )
    [event] = r.decide(state, r.CheckStall(now=T0 + 300, grace_ms=0))
    assert isinstance(event, JobStalled) and event.dead
    after = evolve(state, event)
    assert after.status == "dead" and after.error == "max stalled count reached"
    assert after.attempts_made == 1 and after.stalled_counter == 2


# -- pause, resume, cancel, retry -----------------------------------------------------


@pytest.mark.parametrize("steps", [(), ("claim",)])
def test_pause_from_waiting_or_active_then_resume(steps):
    commands: list[r.Command] = [submitted()]
    if "claim" in steps:
        commands += [claimed(), r.Progress(now=T0, token="tok", progress={"step": 1})]
    state = given(*commands, r.Pause(now=T0 + 1))
    assert state.status == "paused" and state.lock_token is None
    if "claim" in steps:
        assert state.progress == {"step": 1}
    with pytest.raises(InvalidTransition):
        r.decide(state, r.Pause(now=T0 + 2))
    assert given(*commands, r.Pause(now=T0 + 1), r.Resume(now=T0 + 2)).status == "waiting"


def test_resume_refused_unless_paused():
    with pytest.raises(InvalidTransition, match="cannot resume"):
        r.decide(given(submitted()), r.Resume(now=T0))


def test_cancel_terminal_is_refused_and_retry_resets():
    dead = given(submitted(), claimed(), r.Fail(now=T0, token="tok", error="x", unrecoverable=True))
    with pytest.raises(InvalidTransition):
        r.decide(dead, r.Cancel(now=T0))
    again = given(
        submitted(), claimed(), r.Fail(now=T0, token="tok", error="x", unrecoverable=True),
        r.Retry(now=T0 + 5),
    )
    assert again.status == "waiting" and again.attempts_made == 0 and again.error is None
    assert again.started_at is None and again.stalled_counter == 0
    with pytest.raises(InvalidTransition):
        r.decide(again, r.Retry(now=T0))


# -- parent and children -----------------------------------------------------------------


def parent_with_children(*children: str, **options: Any) -> JobState:
    return given(submitted(**options), *(r.AddChild(now=T0, child_id=c) for c in children))


def done(child: str, outcome: str = "complete", policy: str = "fail_parent", error=None):
    return r.NotifyChildDone(
        now=T0 + 50, message_id=f"m-{child}", child_id=child, outcome=outcome,
        policy=policy, error=error,
    )


def test_adding_a_child_puts_parent_in_waiting_children():
    state = parent_with_children("c1")
    assert state.status == "waiting-children" and state.live_children == {"c1"}


def test_max_children_caps_live_children():
    state = parent_with_children("c1", "c2", max_children=2)
    with pytest.raises(InvalidJob, match="max_children"):
        r.decide(state, r.AddChild(now=T0, child_id="c3"))


def test_last_child_done_returns_parent_to_waiting():
    state = parent_with_children("c1", "c2")
    events = r.decide(state, done("c1"))
    assert [type(e) for e in events] == [JobChildDone]
    state = fold_more(state, events)
    events = r.decide(state, done("c2"))
    assert [type(e) for e in events] == [JobChildDone, JobChildrenSettled]
    state = fold_more(state, events)
    assert state.status == "waiting" and set(state.unread) == {"m-c1", "m-c2"}


def test_failed_child_under_fail_parent_fails_parent():
    state = parent_with_children("c1", "c2")
    events = r.decide(state, done("c1", "dead", error="boom"))
    assert isinstance(events[-1], JobFailed) and events[-1].status == "failed"
    after = fold_more(state, events)
    assert after.status == "failed" and after.error == "child job c1 failed: boom"


@pytest.mark.parametrize("policy", ["ignore", "remove_dep"])
def test_failed_child_under_ignore_or_remove_dep_waits_for_the_rest(policy):
    state = parent_with_children("c1", "c2")
    after = fold_more(state, r.decide(state, done("c1", "failed", policy)))
    assert after.status == "waiting-children"
    after = fold_more(after, r.decide(after, done("c2")))
    assert after.status == "waiting"


def test_failed_child_under_continue_runs_parent_at_once():
    state = parent_with_children("c1", "c2")
    after = fold_more(state, r.decide(state, done("c1", "dead", "continue")))
    assert after.status == "waiting" and after.live_children == {"c2"}


def test_terminal_parent_gets_no_child_done():
    state = given(submitted(), r.AddChild(now=T0, child_id="c1"), r.Cancel(now=T0))
    assert r.decide(state, done("c1")) == []


def test_active_parent_with_live_children_completes_into_waiting_children():
    state = given(submitted(), claimed(), r.AddChild(now=T0, child_id="c1"))
    assert state.status == "waiting-children" and state.lock_token == "tok"
    [event] = r.decide(state, r.Complete(now=T0, token="tok", result=1))
    after = evolve(state, event)
    assert after.status == "waiting-children" and after.lock_token is None


def test_child_settling_while_parent_handler_runs_makes_it_active_again():
    state = given(submitted(), claimed(), r.AddChild(now=T0, child_id="c1"))
    after = fold_more(state, r.decide(state, done("c1")))
    assert after.status == "active" and after.lock_token == "tok"
    [completed] = r.decide(after, r.Complete(now=T0, token="tok", result=2))
    assert isinstance(completed, JobCompleted)


def test_only_parent_or_operator_may_send():
    state = given(submitted(parent_id="P"))
    assert r.decide(state, r.SendMessage(now=T0, message_id="m", sender="P", payload=1))
    assert r.decide(state, r.SendMessage(now=T0, message_id="m", sender="operator", payload=1))
    with pytest.raises(InvalidJob, match="parent or an operator"):
        r.decide(state, r.SendMessage(now=T0, message_id="m", sender="stranger", payload=1))


def test_outcome_of_terminal_states():
    base = given(submitted(), claimed())
    assert r.outcome_of(evolve(base, JobTimedOut(error="timeout exceeded", at=T0))) == "timeout"
    assert r.outcome_of(evolve(base, JobCompleted(at=T0))) == "complete"


def fold_more(state: JobState, events: list[Any]) -> JobState:
    for event in events:
        state = evolve(state, event)
    return state
