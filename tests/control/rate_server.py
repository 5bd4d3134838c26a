"""A local OpenAI-wire server with a quota, as a provider counts one: it keeps the
time of every request it receives and answers 429 (with a `retry-after`) to a
request that would make more than `limit` in any `window_s` seconds; every other
request gets `reply`. It can also fail everything (`outage`) with a 503, to stand
for a provider that is down for everyone, and say how many requests were in
flight at once (`most_in_flight`), so a test sees one probe at a time.

    with RateServer(limit=4, window_s=2.0) as server:
        ... GORMES_OPENAI_BASE_URL=server.base_url ...
        assert server.refused == 0 and server.most_in_window() <= 4
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from openai_server import ChatServer, ErrorReply, Plan, ReceivedRequest, TextReply


@dataclass
class RateServer(ChatServer):
    limit: int = 1_000_000
    window_s: float = 60.0
    retry_after_s: float = 1.0
    reply: Plan = field(default_factory=lambda: TextReply("ok", prompt_tokens=5, completion_tokens=2))
    outage: bool = False  # answer 503 to everything (a provider down for everyone)
    hold_s: float = 0.0  # how long each answered request takes (to see overlaps)
    refuse_first: int = 0  # answer the first this many requests 429 whatever the quota
    arrivals: list[float] = field(default_factory=list)  # time.monotonic() of every request
    refusals: list[float] = field(default_factory=list)  # of the ones answered 429
    failures: list[float] = field(default_factory=list)  # of the ones answered 503
    in_flight: int = 0
    most_in_flight: int = 0
    _counting: threading.Lock = field(default_factory=threading.Lock)

    @property
    def refused(self) -> int:
        return len(self.refusals)

    def most_in_window(self) -> int:
        """The most requests this server was sent in any `window_s` seconds (429s included)."""
        times, most, start = sorted(self.arrivals), 0, 0
        for end, at in enumerate(times):
            while at - times[start] >= self.window_s:
                start += 1
            most = max(most, end - start + 1)
        return most

    def reset_counts(self) -> None:
        with self._counting:
            self.arrivals.clear(), self.refusals.clear(), self.failures.clear()
            self.most_in_flight = self.in_flight

    def _next_plan(self, received: ReceivedRequest) -> Plan:
        now = time.monotonic()
        plan: Plan
        with self._counting:
            self.requests.append(received)
            refused = set(self.refusals)
            recent = [t for t in self.arrivals if now - t < self.window_s and t not in refused]
            self.arrivals.append(now)
            if self.outage:
                self.failures.append(now)
                plan = ErrorReply(503, "the provider is down for everyone")
            elif len(recent) >= self.limit or len(self.arrivals) <= self.refuse_first:
                self.refusals.append(now)
                plan = ErrorReply(429, "Rate limit reached for requests",
                                  headers=(("retry-after", f"{self.retry_after_s:g}"),))
            else:
                plan = self.reply
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.hold_s:
                time.sleep(self.hold_s)
        finally:
            with self._counting:
                self.in_flight -= 1
        return plan
