"""Fixtures for the operation tests (helpers are in ops_helpers.py)."""

from __future__ import annotations

import pytest
import trio

from gormes.ops.registry import Registry
from gormes.ops.spec import OperationContext
from ops_helpers import EchoInput, EchoOutput, Recorder, make_echo, spec


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def registry(recorder: Recorder) -> Registry:
    async def boom(ctx: OperationContext, value: EchoInput) -> EchoOutput:
        recorder.calls.append(("test.boom", value))
        raise RuntimeError("the handler broke\nsecond line")

    async def sleepy(ctx: OperationContext, value: EchoInput) -> EchoOutput:
        recorder.calls.append(("test.sleepy", value))
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    return Registry([
        spec("test.echo", make_echo(recorder, "test.echo"),
             trust={"operator", "gateway", "child-agent", "system"}, prompt_visible=True),
        spec("test.admin", make_echo(recorder, "test.admin"), trust={"operator"}, mutating=True),
        spec("test.boom", boom, trust={"operator"}),
        spec("test.sleepy", sleepy, trust={"operator"}, timeout=0.05),
    ])
