"""shell.run: operator only, never offered to a model, off unless enabled."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops_helpers import audit_events
from gormes.tools.builtin import default_registry
from gormes.ops.executor import SHELL_ENV, Executor
from gormes.ops.spec import (
    TRUST_CLASSES, Caller, InvalidOperationInput, OperationDenied, OperationTimeout,
    OperationUnavailable, PathOutsideWorkspace,
)

OPERATOR = Caller(trust="operator", id="cli")


@pytest.fixture
def enabled(store, tmp_path: Path) -> Executor:
    (tmp_path / "sub").mkdir()
    return Executor(default_registry(), store, workspace=tmp_path, shell_enabled=True)


async def test_shell_run_is_disabled_by_default(store, monkeypatch):
    monkeypatch.delenv(SHELL_ENV, raising=False)
    executor = Executor(default_registry(), store)
    with pytest.raises(OperationUnavailable, match="shell.run is disabled"):
        await executor.call("shell.run", {"command": "echo hi"}, OPERATOR)
    (event,) = await audit_events(store)
    assert (event.operation, event.outcome, event.audit_kind) == ("shell.run", "denied", "shell.exec")


async def test_the_environment_enables_it(store, monkeypatch):
    monkeypatch.setenv(SHELL_ENV, "1")
    out = await Executor(default_registry(), store).call("shell.run", {"argv": ["echo", "hi"]}, OPERATOR)
    assert (out.exit_code, out.stdout, out.stderr) == (0, "hi\n", "")


@pytest.mark.parametrize("trust", ["gateway", "child-agent", "system"])
async def test_only_the_operator_may_run_it_even_when_enabled(enabled, store, tmp_path, trust):
    marker = tmp_path / "ran"
    with pytest.raises(OperationDenied, match="shell.run may not be run by"):
        await enabled.call("shell.run", {"command": f"touch {marker}"}, Caller(trust=trust, id="x"))
    assert not marker.exists()
    (event,) = await audit_events(store)
    assert (event.allowed, event.outcome) == (False, "denied")


def test_it_is_never_offered_to_a_model():
    registry = default_registry()
    spec = registry.get("shell.run")
    assert spec.operator_only and spec.mutating and not spec.prompt_visible
    for trust in TRUST_CLASSES:
        assert "shell.run" not in {t.name for t in registry.tool_schemas(trust)}


async def test_it_reports_exit_code_stdout_and_stderr(enabled, store):
    out = await enabled.call("shell.run", {"command": "echo out; echo err >&2; exit 3"}, OPERATOR)
    assert (out.exit_code, out.stdout, out.stderr) == (3, "out\n", "err\n")
    assert [e.outcome for e in await audit_events(store)] == ["started", "ok"]  # written ahead (decision 0062)


async def test_it_runs_in_the_workspace_and_refuses_a_cwd_outside(enabled, tmp_path):
    out = await enabled.call("shell.run", {"argv": ["pwd"], "cwd": "sub"}, OPERATOR)
    assert out.stdout.strip() == str((tmp_path / "sub").resolve())
    with pytest.raises(PathOutsideWorkspace):
        await enabled.call("shell.run", {"argv": ["pwd"], "cwd": ".."}, OPERATOR)


async def test_output_is_truncated(enabled):
    out = await enabled.call(
        "shell.run", {"command": "head -c 100000 /dev/zero | tr '\\0' x", "max_output_bytes": 10}, OPERATOR
    )
    assert (out.stdout, out.stdout_truncated, out.stderr_truncated) == ("x" * 10, True, False)


async def test_a_command_that_overruns_is_killed(enabled, store, tmp_path):
    marker = tmp_path / "finished"
    with pytest.raises(OperationTimeout, match="longer than 0.2s"):
        await enabled.call(
            "shell.run", {"command": f"sleep 30; touch {marker}", "timeout": 0.2}, OPERATOR
        )
    assert not marker.exists()
    assert [e.outcome for e in await audit_events(store)] == ["started", "timeout"]


@pytest.mark.parametrize("raw", [{}, {"command": "ls", "argv": ["ls"]}, {"argv": []}])
async def test_it_needs_exactly_one_of_command_and_argv(enabled, raw):
    with pytest.raises(InvalidOperationInput):
        await enabled.call("shell.run", raw, OPERATOR)
