"""shell.run: run a command on this machine. Operator only, mutating, never
prompt-visible, and refused unless enabled (`Executor(shell_enabled=True)` or
GORMES_SHELL_ENABLED=1).

The command runs in its own session so that on timeout or cancellation the whole
process group is killed, not only the shell. Output is read as it comes and only
the first `max_output_bytes` of each stream are kept, so a chatty command cannot
fill memory.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
from pathlib import Path
from typing import Annotated

import msgspec
import trio

from gormes.tools.fs import resolve_inside
from gormes.ops.spec import (
    OperationContext, OperationSpec, OperationTimeout, OperationUnavailable,
)

SHELL_TIMEOUT = 300.0
OUTPUT_DEFAULT_BYTES = 64 * 1024
OUTPUT_MAX_BYTES = 4 * 1024 * 1024


class ShellRunInput(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Give exactly one of `command` (run by /bin/sh -c) and `argv` (run directly)."""

    command: str | None = None
    argv: list[str] | None = None
    cwd: Annotated[str, msgspec.Meta(
        description="Working directory; inside the workspace when one is configured.")] | None = None
    timeout: Annotated[float, msgspec.Meta(gt=0, le=SHELL_TIMEOUT)] | None = None
    max_output_bytes: Annotated[int, msgspec.Meta(ge=1, le=OUTPUT_MAX_BYTES)] = OUTPUT_DEFAULT_BYTES

    def __post_init__(self) -> None:
        if (self.command is None) == (self.argv is None):
            raise ValueError("give exactly one of `command` and `argv`")
        if self.argv is not None and not self.argv:
            raise ValueError("`argv` must not be empty")


class ShellRunOutput(msgspec.Struct, kw_only=True):
    exit_code: int  # negative: killed by that signal
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool


async def _collect(stream: trio.abc.ReceiveStream, limit: int, into: dict[str, object], key: str) -> None:
    kept = bytearray()
    truncated = False
    async for chunk in stream:
        room = limit - len(kept)
        if len(chunk) > room:
            truncated = True
        kept += chunk[:max(room, 0)]
    into[key] = (bytes(kept), truncated)


def _cwd(ctx: OperationContext, cwd: str | None) -> Path | None:
    if ctx.workspace is not None:
        root = ctx.workspace.resolve(strict=True)
        return resolve_inside(root, cwd or ".")
    return None if cwd is None else Path(cwd)


def _kill_group(process: trio.Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def shell_available(ctx: OperationContext) -> None:
    if not ctx.shell_enabled:
        raise OperationUnavailable(
            "shell.run is disabled (enable it with GORMES_SHELL_ENABLED=1)"
        )


async def shell_run(ctx: OperationContext, value: ShellRunInput) -> ShellRunOutput:
    shell_available(ctx)  # the executor asked already; a direct call asks here
    argv = ["/bin/sh", "-c", value.command] if value.command is not None else list(value.argv or ())
    timeout = value.timeout or math.inf
    process = await trio.lowlevel.open_process(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=_cwd(ctx, value.cwd), start_new_session=True,
    )
    out: dict[str, object] = {}
    try:
        with trio.move_on_after(timeout) as deadline:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_collect, process.stdout, value.max_output_bytes, out, "stdout")
                nursery.start_soon(_collect, process.stderr, value.max_output_bytes, out, "stderr")
            code = await process.wait()
        if deadline.cancelled_caught:
            raise OperationTimeout(f"shell.run: the command ran longer than {value.timeout:g}s")
    finally:
        if process.returncode is None:
            _kill_group(process)
            with trio.CancelScope(shield=True):
                await process.wait()
        with trio.CancelScope(shield=True):
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    await stream.aclose()
    stdout, stdout_cut = out["stdout"]  # type: ignore[misc]
    stderr, stderr_cut = out["stderr"]  # type: ignore[misc]
    return ShellRunOutput(
        exit_code=code, stdout=stdout.decode("utf-8", "replace"),
        stderr=stderr.decode("utf-8", "replace"),
        stdout_truncated=stdout_cut, stderr_truncated=stderr_cut,
    )


SPECS = (
    OperationSpec(
        name="shell.run", description="Run a command on this machine (operator only; off unless enabled).",
        input_type=ShellRunInput, output_type=ShellRunOutput, handler=shell_run,
        trust=frozenset({"operator"}), audit_kind="shell.exec", mutating=True,
        idempotent=False, prompt_visible=False, timeout=SHELL_TIMEOUT,
        doctor_checks=("shell-enabled",), available=shell_available,
        write_ahead=True,  # a command, outside the log
    ),
)
