"""`gormes run` and `gormes fork` interrupted by SIGINT or SIGTERM: the run is
recorded as cancelled ("interrupted by SIGINT"), not left with no end; the command
exits 128 + the signal's number; the interrupted run still replays exactly."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from cli_helpers import REPO, cli_env, gormes_command, run_gormes


def script(tmp_path: Path, name: str, replies: list[dict]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"agents": [{"replies": replies}]}))
    return f"scripted:{path}"


def interrupt_after(line_start: str, command: list[str], signum: int) -> tuple[int, str, str]:
    """Start the command, wait for a stdout line starting with `line_start`, send
    the signal; (exit code, stdout, stderr)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env(), cwd=REPO)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith(line_start), (first, proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, first + out, err


def listed(db: Path) -> dict[str, dict]:
    result = run_gormes(db, "runs", "list", "--json")
    assert result.returncode == 0, result.stderr
    return {r["run_id"]: r for r in json.loads(result.stdout)}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_is_recorded_as_cancelled(tmp_path: Path, signum: int) -> None:
    db = tmp_path / "g.db"
    model = script(tmp_path, "slow", [{"text": "too late", "delay_ms": 60_000}])
    code, out, err = interrupt_after("run ", gormes_command(db, "run", "agent", "--prompt", "hi", "--model", model),
                                     signum)
    name = signal.Signals(signum).name
    assert code == 128 + signum, (code, out, err)
    run_id = out.split()[1]
    assert f"run {run_id} cancelled" in out and f"interrupted by {name}" in err
    row = listed(db)[run_id]
    assert (row["status"], row["error"]) == ("cancelled", f"interrupted by {name}")
    replayed = run_gormes(db, "replay", run_id, "--json")
    report = json.loads(replayed.stdout)
    assert replayed.returncode == 0 and report["exact"] and report["status"] == "cancelled", report


def test_an_interrupted_fork_is_recorded_as_cancelled(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    quick = script(tmp_path, "quick", [{"tool_calls": [{"name": "time.now", "arguments": {}}]}, {"text": "done"}])
    ran = run_gormes(db, "run", "agent", "--prompt", "hi", "--model", quick, "--json")
    assert ran.returncode == 0, ran.stderr
    source = json.loads(ran.stdout)["run_id"]
    shown = json.loads(run_gormes(db, "runs", "show", source, "--json").stdout)
    assert shown["status"] == "completed"
    first_turn = next(e["position"] for e in shown["timeline"] if e["type"] == "run.llm_turn")
    # the fork copies the first turn, makes its tool call live, then waits on the second
    slow = script(tmp_path, "slow", [
        {"tool_calls": [{"name": "time.now", "arguments": {}}]}, {"text": "too late", "delay_ms": 60_000}])
    fork = gormes_command(db, "fork", source, "--at", str(first_turn), "--model", slow, "--yes")
    proc = subprocess.Popen(fork, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO)
    try:
        new = _wait_for_a_second_run(db, source)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, (out, err)
    row = listed(db)[new]
    assert (row["status"], row["error"]) == ("cancelled", "interrupted by SIGTERM")


def _wait_for_a_second_run(db: Path, source: str, timeout: float = 30) -> str:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = run_gormes(db, "runs", "list", "--json")
        if result.returncode == 0:
            others = [r for r in json.loads(result.stdout) if r["run_id"] != source and r["status"] == "running"]
            if others:
                return others[0]["run_id"]
        time.sleep(0.1)
    raise AssertionError("the fork never started its run")
