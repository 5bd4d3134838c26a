"""The resource governor: how many jobs a worker may run at once, given the load.

Every `interval_s` the governor samples CPU and memory use. Above `cpu_high` or
`memory_high` it halves the worker's effective concurrency (never below the
floor); below `cpu_low` and `memory_low` it raises it by a step (never above the
ceiling); in between it holds. At or above `memory_breaker` it also trips the
circuit breaker: the worker cancels its lowest-priority active job as
unrecoverable ("circuit breaker: memory pressure"), one job per sample.

CPU means this worker's own use by default (`cpu="process"`: the worker process
and its child processes, as a share of all cores), not the machine's: on a
shared box other tenants' load dropped every worker to a limit of 1 and waiting
jobs starved, and throttling us does not lower their load (issue 19, item 9).
`cpu="machine"` is the old reading, for a box the workers have to themselves.
Memory is always the machine's: running out of it hurts whoever caused it.

Every decision carries its reason (`Decision.reason`, pure); the governor keeps
the last one and a short history of limit changes and breaker trips, which the
worker's heartbeat carries (`Governor.report()`, decision 0006) for `gormes top`
and `gormes doctor` to say why the limit is what it is.

    policy = GovernorSettings(cpu_high=80).policy(ceiling=8)   # from `gormes worker` or the daemon's TOML
    decide(policy, 8, LoadSample(cpu_percent=95, memory_percent=40)).reason
    # 'cpu 95% (process) above 80%: halved 8 -> 4'

The sampler and the clock are injectable, so tests drive the governor with chosen loads.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import msgspec
import trio

from gormes.projections.ledger import BREAKER_ERROR  # noqa: F401 - what the worker records, and top counts
CpuSource = Literal["process", "machine"]
RECENT = 8  # limit changes and breaker trips a report carries


class LoadSample(msgspec.Struct, frozen=True):
    cpu_percent: float
    memory_percent: float


Sampler = Callable[[], LoadSample]


class ProcessCpu:
    """CPU use of a process tree between two calls, as a share of all cores (0..100).

    `cpu_seconds` reads the tree's CPU time so far; `clock` is monotonic seconds."""

    def __init__(self, cpu_seconds: Callable[[], float], clock: Callable[[], float], cores: int) -> None:
        self._cpu_seconds = cpu_seconds
        self._clock = clock
        self._cores = max(1, cores)
        self._last = (clock(), cpu_seconds())

    def percent(self) -> float:
        now, used = self._clock(), self._cpu_seconds()
        then, before = self._last
        self._last = (now, used)
        if now <= then:
            return 0.0
        # A child that died unreaped drops out of the sum: clamp, never negative.
        return max(0.0, min(100.0, 100.0 * (used - before) / ((now - then) * self._cores)))


def tree_cpu_seconds(process: Any) -> float:
    """User and system CPU seconds of a psutil Process, its reaped children and its
    live descendants."""
    import psutil

    def of(p: Any) -> float:
        t = p.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    total = of(process)
    for child in process.children(recursive=True):
        try:
            total += of(child)
        except psutil.Error:  # gone, a zombie, or not ours to read
            pass
    return total


def psutil_sampler(cpu: CpuSource = "process") -> Sampler:
    """Memory in use on the machine, and CPU use since the previous call: this
    process tree's (`process`) or every core's (`machine`)."""
    import psutil

    if cpu == "machine":
        psutil.cpu_percent(interval=None)  # prime: the first call always reads 0.0
        read_cpu: Callable[[], float] = lambda: psutil.cpu_percent(interval=None)  # noqa: E731
    else:
        me = psutil.Process()
        read_cpu = ProcessCpu(lambda: tree_cpu_seconds(me), time.monotonic, psutil.cpu_count() or 1).percent

    def sample() -> LoadSample:
        return LoadSample(cpu_percent=read_cpu(), memory_percent=psutil.virtual_memory().percent)

    return sample


class GovernorPolicy(msgspec.Struct, frozen=True, kw_only=True):
    floor: int = 1
    ceiling: int = 10
    cpu: CpuSource = "process"
    cpu_high: float = 90.0
    cpu_low: float = 70.0
    memory_high: float = 85.0
    memory_low: float = 75.0
    memory_breaker: float = 95.0
    interval_s: float = 1.0

    def __post_init__(self) -> None:
        # ValueError: msgspec.convert (the daemon's settings) turns it into a validation error.
        if not 1 <= self.floor <= self.ceiling:
            raise ValueError(f"governor wants 1 <= floor <= ceiling, got {self.floor}..{self.ceiling}")
        for name, low, high in (("cpu", self.cpu_low, self.cpu_high), ("memory", self.memory_low, self.memory_high)):
            if not 0 <= low <= high <= 100:
                raise ValueError(f"governor wants 0 <= {name}_low <= {name}_high <= 100, got {low} and {high}")
        if not self.memory_high <= self.memory_breaker <= 100:
            raise ValueError(f"governor wants memory_high <= memory_breaker <= 100, got "
                             f"{self.memory_high} and {self.memory_breaker}")
        if not (math.isfinite(self.interval_s) and self.interval_s > 0):  # nan passed `<= 0`, then broke trio.sleep
            raise ValueError(f"governor wants a finite interval_s > 0, got {self.interval_s}")


class GovernorSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A policy without its ceiling (the worker's concurrency): the `[governor_policy]`
    table of the daemon's TOML and the `gormes worker` governor options."""

    floor: int = 1
    cpu: CpuSource = "process"
    cpu_high: float = 90.0
    cpu_low: float = 70.0
    memory_high: float = 85.0
    memory_low: float = 75.0
    memory_breaker: float = 95.0
    interval_s: float = 1.0

    def policy(self, *, ceiling: int) -> GovernorPolicy:
        """Raises ValueError for thresholds that do not fit together (or a floor above `ceiling`)."""
        return GovernorPolicy(ceiling=ceiling, **msgspec.structs.asdict(self))


class Decision(msgspec.Struct, frozen=True):
    limit: int
    trip_breaker: bool
    reason: str = ""


def _pct(value: float) -> str:
    return f"{value:.0f}%"


def decide(policy: GovernorPolicy, limit: int, sample: LoadSample) -> Decision:
    """The next concurrency limit for a sample, and why (pure: no clock, no I/O)."""
    p, cpu, mem = policy, sample.cpu_percent, sample.memory_percent
    cpu_text = f"cpu {_pct(cpu)} ({p.cpu})"
    if cpu > p.cpu_high or mem > p.memory_high:
        cause = (f"{cpu_text} above {_pct(p.cpu_high)}" if cpu > p.cpu_high
                 else f"memory {_pct(mem)} above {_pct(p.memory_high)}")
        new = max(p.floor, limit // 2)
        verb = f"halved {limit} -> {new}" if new < limit else f"held at the floor {new}"
    elif cpu < p.cpu_low and mem < p.memory_low:
        cause = f"{cpu_text} below {_pct(p.cpu_low)}, memory {_pct(mem)} below {_pct(p.memory_low)}"
        new = min(p.ceiling, limit + max(1, p.ceiling // 8))
        verb = f"raised {limit} -> {new}" if new > limit else f"at the ceiling {new}"
    else:
        cause = (f"{cpu_text} between {_pct(p.cpu_low)} and {_pct(p.cpu_high)}" if cpu >= p.cpu_low
                 else f"memory {_pct(mem)} between {_pct(p.memory_low)} and {_pct(p.memory_high)}")
        new = limit
        verb = f"held at {new}"
    new = max(p.floor, min(p.ceiling, new))
    reason = f"{cause}: {verb}"
    trip = mem >= p.memory_breaker
    if trip:
        reason += f"; memory {_pct(mem)} at or above the breaker {_pct(p.memory_breaker)}: breaker tripped"
    return Decision(limit=new, trip_breaker=trip, reason=reason)


class GovernorChange(msgspec.Struct, frozen=True, kw_only=True):
    """A limit change or a breaker trip, as the heartbeat carries it."""

    at: float  # seconds since the epoch
    limit: int
    previous: int
    breaker: bool
    reason: str


class GovernorReport(msgspec.Struct, frozen=True, kw_only=True):
    """The governor's state in a worker's heartbeat info (key `governor`)."""

    limit: int
    floor: int
    ceiling: int
    cpu: CpuSource
    cpu_percent: float | None
    memory_percent: float | None
    reason: str  # of the last decision
    thresholds: dict[str, float]
    recent: list[GovernorChange]  # newest last


class Governor:
    """Keeps `limit` current; calls `on_breaker` when memory crosses the breaker line."""

    def __init__(self, policy: GovernorPolicy, sampler: Sampler | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self._sampler = sampler
        self._clock = clock
        self.limit = policy.ceiling
        self.last_sample: LoadSample | None = None
        self.last_reason = f"no load sampled yet: starts at the ceiling {policy.ceiling}"
        self.recent: deque[GovernorChange] = deque(maxlen=RECENT)
        self._on_change: list[Callable[[int], None]] = []

    def on_change(self, callback: Callable[[int], None]) -> None:
        self._on_change.append(callback)

    def observe(self, sample: LoadSample) -> Decision:
        decision = decide(self.policy, self.limit, sample)
        self.last_sample = sample
        self.last_reason = decision.reason
        previous = self.limit
        if decision.limit != previous or decision.trip_breaker:
            self.recent.append(GovernorChange(at=self._clock(), limit=decision.limit, previous=previous,
                                              breaker=decision.trip_breaker, reason=decision.reason))
        if decision.limit != previous:
            self.limit = decision.limit
            for callback in self._on_change:
                callback(self.limit)
        return decision

    def report(self) -> dict[str, Any]:
        """A `GovernorReport` as plain JSON data, for the heartbeat row."""
        p, sample = self.policy, self.last_sample
        return msgspec.to_builtins(GovernorReport(
            limit=self.limit, floor=p.floor, ceiling=p.ceiling, cpu=p.cpu,
            cpu_percent=sample.cpu_percent if sample else None,
            memory_percent=sample.memory_percent if sample else None,
            reason=self.last_reason,
            thresholds={"cpu_high": p.cpu_high, "cpu_low": p.cpu_low, "memory_high": p.memory_high,
                        "memory_low": p.memory_low, "memory_breaker": p.memory_breaker},
            recent=list(self.recent),
        ))

    async def run(self, on_breaker: Callable[[], Awaitable[None]]) -> None:
        sampler = self._sampler or psutil_sampler(self.policy.cpu)
        while True:
            await trio.sleep(self.policy.interval_s)
            sample = sampler()  # psutil reads /proc without blocking: no thread needed
            if self.observe(sample).trip_breaker:
                await on_breaker()
