"""The governor's policy from settings, its reasons, its history, and what CPU it reads."""

from __future__ import annotations

import time

import msgspec
import psutil
import pytest

from gormes.actors.jobs.governor import (
    Governor,
    GovernorPolicy,
    GovernorSettings,
    LoadSample,
    ProcessCpu,
    decide,
    psutil_sampler,
    tree_cpu_seconds,
)


def load(cpu: float, memory: float = 10.0) -> LoadSample:
    return LoadSample(cpu_percent=cpu, memory_percent=memory)


def test_settings_become_a_policy_with_the_workers_concurrency_as_ceiling():
    settings = GovernorSettings(floor=2, cpu="machine", cpu_high=60, cpu_low=40, memory_high=70,
                                memory_low=50, memory_breaker=80, interval_s=0.5)
    policy = settings.policy(ceiling=12)
    assert policy == GovernorPolicy(floor=2, ceiling=12, cpu="machine", cpu_high=60, cpu_low=40,
                                    memory_high=70, memory_low=50, memory_breaker=80, interval_s=0.5)
    # The thresholds are what decide() obeys: 65% is overload at cpu_high 60, not at the default 90.
    assert decide(policy, 12, load(65)).limit == 6
    assert decide(GovernorSettings().policy(ceiling=12), 12, load(65)).limit == 12
    assert decide(policy, 12, load(10, memory=81)).trip_breaker
    assert not decide(GovernorSettings().policy(ceiling=12), 12, load(10, memory=81)).trip_breaker


def test_the_default_reads_this_process_not_the_machine():
    assert GovernorSettings().cpu == "process" and GovernorPolicy().cpu == "process"


@pytest.mark.parametrize("values, says", [
    ({"cpu_low": 95}, "cpu_low <= cpu_high"),
    ({"memory_high": 120}, "memory_low <= memory_high <= 100"),
    ({"memory_breaker": 80}, "memory_high <= memory_breaker"),
    ({"floor": 9}, "floor <= ceiling"),
    ({"interval_s": 0}, "interval_s > 0"),
])
def test_thresholds_that_do_not_fit_together_are_refused(values, says):
    with pytest.raises(ValueError, match=says):
        GovernorSettings(**values).policy(ceiling=8)


def test_unknown_or_mistyped_settings_keys_are_refused():
    with pytest.raises(msgspec.ValidationError, match="cpu_hi"):
        msgspec.convert({"cpu_hi": 50}, GovernorSettings)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"cpu": "host"}, GovernorSettings)


def test_every_decision_says_why():
    policy = GovernorPolicy(floor=1, ceiling=8, cpu_high=80, cpu_low=50)
    assert decide(policy, 8, load(95)).reason == "cpu 95% (process) above 80%: halved 8 -> 4"
    assert decide(policy, 1, load(95)).reason == "cpu 95% (process) above 80%: held at the floor 1"
    assert decide(policy, 4, load(10, 88)).reason == "memory 88% above 85%: halved 4 -> 2"
    assert decide(policy, 4, load(10, 20)).reason == (
        "cpu 10% (process) below 50%, memory 20% below 75%: raised 4 -> 5")
    assert decide(policy, 8, load(10, 20)).reason.endswith("at the ceiling 8")
    assert decide(policy, 4, load(60, 20)).reason == "cpu 60% (process) between 50% and 80%: held at 4"
    assert decide(policy, 4, load(10, 80)).reason == "memory 80% between 75% and 85%: held at 4"
    tripped = decide(policy, 4, load(10, 97))
    assert tripped.trip_breaker and tripped.reason.endswith(
        "memory 97% at or above the breaker 95%: breaker tripped")


def test_the_governor_keeps_its_last_reason_and_recent_changes_for_the_heartbeat():
    times = iter(range(100, 200))
    governor = Governor(GovernorPolicy(floor=1, ceiling=8), clock=lambda: float(next(times)))
    report = governor.report()
    assert report["limit"] == 8 and report["reason"].startswith("no load sampled yet")
    assert report["recent"] == [] and report["cpu_percent"] is None
    governor.observe(load(99))          # 8 -> 4: a change
    governor.observe(load(80))          # held: no change recorded
    governor.observe(load(5, 97))       # memory over high and breaker: 4 -> 2, tripped
    report = governor.report()
    assert report["limit"] == 2 and report["cpu"] == "process"
    assert report["cpu_percent"] == 5 and report["memory_percent"] == 97
    assert report["thresholds"]["memory_breaker"] == 95.0
    assert [(c["at"], c["previous"], c["limit"], c["breaker"]) for c in report["recent"]] == [
        (100.0, 8, 4, False), (101.0, 4, 2, True)]
    assert report["recent"][0]["reason"] == "cpu 99% (process) above 90%: halved 8 -> 4"
    assert report["reason"] == report["recent"][-1]["reason"]
    msgspec.json.encode(report)  # plain JSON data: the heartbeat row's info


def test_the_history_is_bounded():
    governor = Governor(GovernorPolicy(floor=1, ceiling=8), clock=lambda: 0.0)
    for _ in range(20):
        governor.observe(load(5, 99))
    assert len(governor.report()["recent"]) == 8


def test_process_cpu_is_the_trees_cpu_time_over_wall_time_and_cores():
    cpu = [10.0]
    now = [1000.0]
    meter = ProcessCpu(lambda: cpu[0], lambda: now[0], cores=4)
    cpu[0], now[0] = 12.0, 1001.0  # 2 cpu-seconds in 1 s on 4 cores: half the machine
    assert meter.percent() == 50.0
    cpu[0], now[0] = 11.0, 1002.0  # a child dropped out of the sum: never negative
    assert meter.percent() == 0.0
    cpu[0], now[0] = 30.0, 1003.0
    assert meter.percent() == 100.0
    assert meter.percent() == 0.0  # no time passed


def test_the_real_samplers_read_this_process_and_the_machine():
    me = psutil.Process()
    before = tree_cpu_seconds(me)
    # /proc counts CPU in clock ticks (10 ms), so a fixed loop can finish within one
    # tick on a fast machine; burn a fifth of a second by the precise process clock.
    spent_from = time.process_time()
    while time.process_time() - spent_from < 0.2:
        sum(i * i for i in range(10_000))
    assert tree_cpu_seconds(me) > before
    for source in ("process", "machine"):
        sample = psutil_sampler(source)()
        assert 0.0 <= sample.cpu_percent <= 100.0 and 0.0 < sample.memory_percent <= 100.0
