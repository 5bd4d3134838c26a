"""What `gormes doctor` and `gormes top` say of the provider limits, on both
backends: an open outage guard fails the doctor and reads `outage` in top; a
back-off everyone waits out warns; a provider that answers is ok. The rows are
written by the real limiter (its clock injected), read as the commands read them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from doctor_helpers import T0, check, doctor
from pg_helpers import backend_store
from rich.console import Console

from gormes.control.rate_limits import ProviderLimits
from gormes.control.rate_rules import parse_rules
from gormes.dashboard.read import read_snapshot
from gormes.dashboard.render import render_dashboard
from gormes.providers.base import Message, ModelRequest, ProviderError
from gormes.providers.pricing import load_table

REQUEST = ModelRequest(model="gpt-x", messages=(Message(role="user", content="hi"),))


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def fail_once(limits: ProviderLimits, error: ProviderError) -> None:
    with pytest.raises(ProviderError):
        async with limits.turn("openai:gpt-x", REQUEST):
            raise error


def target_of(store, db_path: Path) -> str | Path:
    if store.dialect == "sqlite":
        return db_path
    from pg_helpers import url_for_schema

    return url_for_schema(store.schema)


def text_of(renderable) -> str:
    with open(os.devnull, "w") as sink:
        console = Console(record=True, width=160, color_system=None, file=sink)
        console.print(renderable)
        return console.export_text()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_doctor_and_top_say_a_provider_is_down_backing_off_or_fine(backend, db_path: Path) -> None:
    clock = Clock(T0 - 30)
    async with backend_store(backend, db_path) as store:
        target = target_of(store, db_path)
        limits = ProviderLimits(store, parse_rules("openai:*=100rpm"), outage_after=2, clock=clock)
        assert check(doctor(target), "providers.outage").message.startswith("no model turn")

        for _ in range(2):
            await fail_once(limits, ProviderError("openai: HTTP 503: overloaded", retryable=True, status=503))
        clock.now = T0
        down = check(doctor(target), "providers.outage")
        assert down.status == "fail", down
        assert "openai:gpt-x (halted 30s after 2 failures in a row; waiting to probe; " \
               "last: openai: HTTP 503: overloaded)" in down.message
        assert "first probe" in down.remediation
        snapshot = await read_snapshot(store, pricing=load_table(), now=T0)
        (row,) = snapshot.providers
        assert (row.key, row.state, row.failures, row.requests) == ("openai:gpt-x", "outage", 2, 2)
        line = next(li for li in text_of(render_dashboard(snapshot)).splitlines() if "openai:gpt-x" in li)
        assert "outage" in line and "halted 30s: waiting to probe" in line and "2 req" in line

        # the probe gets its reply: closed for everyone
        async with limits.turn("openai:gpt-x", REQUEST):
            pass
        assert check(doctor(target), "providers.outage").status == "ok"

        await fail_once(limits, ProviderError("openai: HTTP 429: slow down", retryable=True, status=429,
                                              retry_after=40.0))
        blocked = check(doctor(target, now=T0 + 10), "providers.outage")
        assert blocked.status == "warn" and "openai:gpt-x for 30s more (openai: HTTP 429: slow down)" in blocked.message
        snapshot = await read_snapshot(store, pricing=load_table(), now=T0 + 10)
        assert snapshot.providers[0].state == "backing off" and snapshot.providers[0].blocked_s == 30.0
        assert "everyone waits 30s more" in text_of(render_dashboard(snapshot))
        assert check(doctor(target, now=T0 + 41), "providers.outage").status == "ok"


async def test_top_shows_no_providers_panel_before_any_turn(store) -> None:
    snapshot = await read_snapshot(store, pricing=load_table())
    assert snapshot.providers == ()
    assert "providers:" not in text_of(render_dashboard(snapshot))
