"""The pure cron rules: expressions, fire times, folding, deciding, missed fires."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gormes.actors.cron.rules import (
    Add,
    Fire,
    InvalidSchedule,
    Pause,
    Remove,
    Resume,
    ScheduleExists,
    ScheduleNotFound,
    decide,
    due_fire,
    fire_key,
    latest_fire,
    next_due,
    next_fire,
    parse_expression,
)
from gormes.actors.actor import fold
from gormes.actors.cron.actor import CRON
from gormes.events.cron import CronFired, CronScheduled


def ms(text: str) -> int:
    dt = datetime.fromisoformat(text).replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


T0 = ms("2024-03-01T10:00:30")


def added(schedule: str = "*/15 * * * *", at: int = T0) -> list:
    return decide(None, Add(name="tidy", schedule=schedule, job="echo", data={"n": 1}, at=at))


def test_next_and_latest_fire_times():
    assert next_fire("*/15 * * * *", T0) == ms("2024-03-01T10:15:00")
    assert next_fire("*/15 * * * *", ms("2024-03-01T10:15:00")) == ms("2024-03-01T10:30:00")
    assert latest_fire("*/15 * * * *", T0) == ms("2024-03-01T10:00:00")
    assert latest_fire("*/15 * * * *", ms("2024-03-01T10:15:00")) == ms("2024-03-01T10:15:00")
    assert next_fire(parse_expression("@daily"), T0) == ms("2024-03-02T00:00:00")


@pytest.mark.parametrize("bad", ["", "* * * *", "61 * * * *", "* * * * * *", "@sometimes", "a b c d e"])
def test_bad_expressions_are_refused_with_a_reason(bad: str):
    with pytest.raises(InvalidSchedule, match="bad schedule"):
        parse_expression(bad)


def test_a_fresh_schedule_fires_only_after_it_was_added():
    state = fold(CRON, added()).value
    assert state is not None and state.status == "active"
    # 10:00:00 is before the schedule existed: not due
    assert due_fire(state, T0) is None
    assert next_due(state, T0) == ms("2024-03-01T10:15:00")
    assert due_fire(state, ms("2024-03-01T10:15:00")) == ms("2024-03-01T10:15:00")


def test_a_fire_is_decided_once():
    events = added()
    fire_at = ms("2024-03-01T10:15:00")
    first = decide(fold(CRON, events).value, Fire(fire_at=fire_at, job_id="J1", at=fire_at + 5))
    assert [type(e) for e in first] == [CronFired]
    events += first
    assert decide(fold(CRON, events).value, Fire(fire_at=fire_at, job_id="J2", at=fire_at + 9)) == []
    assert due_fire(fold(CRON, events).value, fire_at + 60_000) is None
    assert due_fire(fold(CRON, events).value, ms("2024-03-01T10:30:00")) == ms("2024-03-01T10:30:00")


def test_missed_fires_fire_once_for_the_latest():
    state = fold(CRON, added()).value
    later = ms("2024-03-01T12:07:00")  # 10:15 .. 12:00 were all missed
    assert due_fire(state, later) == ms("2024-03-01T12:00:00")
    # an older missed time is refused as a fire
    assert decide(state, Fire(fire_at=ms("2024-03-01T10:15:00"), job_id="J", at=later)) == []
    events = added() + decide(state, Fire(fire_at=ms("2024-03-01T12:00:00"), job_id="J", at=later))
    assert due_fire(fold(CRON, events).value, later) is None


def test_an_older_fire_time_cannot_be_fired_after_a_newer_one():
    events = added()
    newer = ms("2024-03-01T12:00:00")
    events += decide(fold(CRON, events).value, Fire(fire_at=newer, job_id="J1", at=newer))
    older = ms("2024-03-01T11:45:00")
    assert decide(fold(CRON, events).value, Fire(fire_at=older, job_id="J2", at=newer)) == []


def test_a_time_that_is_no_fire_time_is_not_fired():
    state = fold(CRON, added()).value
    odd = ms("2024-03-01T10:16:00")
    assert decide(state, Fire(fire_at=odd, job_id="J", at=odd + 1)) == []


def test_pause_skips_fires_and_resume_counts_from_the_resume():
    events = added()
    events += decide(fold(CRON, events).value, Pause("tidy", ms("2024-03-01T10:05:00")))
    paused = fold(CRON, events).value
    assert paused is not None and paused.status == "paused"
    assert due_fire(paused, ms("2024-03-01T11:00:00")) is None
    assert next_due(paused, ms("2024-03-01T11:00:00")) is None
    assert decide(paused, Pause("tidy", ms("2024-03-01T10:06:00"))) == []  # already paused
    events += decide(paused, Resume("tidy", ms("2024-03-01T11:10:00")))
    resumed = fold(CRON, events).value
    assert resumed is not None and resumed.status == "active"
    # 10:15 .. 11:00 fell due while paused: skipped
    assert due_fire(resumed, ms("2024-03-01T11:10:00")) is None
    assert due_fire(resumed, ms("2024-03-01T11:15:00")) == ms("2024-03-01T11:15:00")
    assert decide(resumed, Resume("tidy", ms("2024-03-01T11:11:00"))) == []


def test_remove_then_add_again_is_a_fresh_schedule():
    events = added()
    with pytest.raises(ScheduleExists):
        decide(fold(CRON, events).value, Add(name="tidy", schedule="* * * * *", job="echo", at=T0))
    events += decide(fold(CRON, events).value, Remove("tidy", T0 + 1000))
    removed = fold(CRON, events).value
    assert removed is not None and not removed.live
    assert due_fire(removed, ms("2024-03-01T11:00:00")) is None
    with pytest.raises(ScheduleNotFound):
        decide(removed, Pause("tidy", T0 + 2000))
    events += decide(removed, Add(name="tidy", schedule="0 * * * *", job="echo", at=T0 + 3000))
    again = fold(CRON, events).value
    assert again is not None and again.status == "active" and again.schedule == "0 * * * *"
    assert again.version == 3


def test_commands_on_an_unknown_schedule_are_refused():
    for command in (Pause("nope", T0), Resume("nope", T0), Remove("nope", T0)):
        with pytest.raises(ScheduleNotFound, match="no schedule named 'nope'"):
            decide(None, command)


@pytest.mark.parametrize("name", ["", "-x", "a b", "a/b", "x" * 200])
def test_bad_names_are_refused(name: str):
    with pytest.raises(InvalidSchedule, match="bad schedule name"):
        decide(None, Add(name=name, schedule="* * * * *", job="echo", at=T0))


def test_added_events_carry_the_normalised_expression():
    (event,) = decide(None, Add(name="n", schedule="  @hourly ", job="echo", at=T0))
    assert isinstance(event, CronScheduled) and event.schedule == "0 * * * *"


def test_the_idempotency_key_names_schedule_and_fire_time():
    assert fire_key("tidy", ms("2024-03-01T10:15:00")) == "cron:tidy:2024-03-01T10:15:00Z"
