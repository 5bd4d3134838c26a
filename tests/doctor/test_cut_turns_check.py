"""runs.cut_turns: model turns cut short before their replies were read (`run.llm_cut`,
decision 0080) in the last 7 days, from the doctor's log summary: counted in an
ok verdict while they are a small share of the model tokens, a warning past
`cut_share_warn`; older days are not counted, and an incremental run (the
summary the last one kept) counts what it folded before."""

from __future__ import annotations

import time
from pathlib import Path

from doctor_helpers import append, check, doctor, fresh, sql

from gormes.events.jobs import Tokens
from gormes.events.runs import RecordedReply, RunCancelled, RunLlmCut, RunLlmTurn, RunStarted, run_stream

NOW = time.time()  # append_now records at the clock's time: the window is the last 7 days from it
DAY = 86_400.0


def started(run_id: str) -> RunStarted:
    return RunStarted(run_id=run_id, handler="agent", handler_version="v")


def turn(seq: int, tokens: int) -> RunLlmTurn:
    return RunLlmTurn(seq=seq, request_hash="h", model="m", message_count=1,
                      reply=RecordedReply(content="ok"), usage=Tokens(input=tokens - 10, output=10))


def cut(at_seq: int, tokens: int) -> RunLlmCut:
    return RunLlmCut(at_seq=at_seq, request_hash="h", model="m", usage=Tokens(input=tokens - 1, output=1))


def a_run(path: Path, run_id: str, turns: list[int], cuts: list[int]) -> None:
    events = [started(run_id), *(turn(i, n) for i, n in enumerate(turns, start=1))]
    events += [cut(len(turns) + 1, n) for n in cuts]
    append(path, run_stream(run_id), [*events, RunCancelled(reason="deadline")])


def test_no_cut_turn_is_ok(db_path: Path) -> None:
    a_run(fresh(db_path), "read", [1000, 1000], [])
    result = check(doctor(db_path, now=NOW), "runs.cut_turns")
    assert result.status == "ok"
    assert result.message == "no model turn was cut short before its reply was read in the last 7 days"


def test_a_few_cut_turns_are_counted_in_an_ok(db_path: Path) -> None:
    a_run(fresh(db_path), "read", [5000, 4000], [])
    a_run(db_path, "cut", [], [500])
    result = check(doctor(db_path, now=NOW), "runs.cut_turns")
    assert result.status == "ok", result
    assert result.message == ("1 model turn(s) cut short before their replies were read in the last 7 days, "
                              "500 tokens billed for them (5% of the model tokens; runs: cut)")


def test_cut_turns_past_the_share_warn_and_name_their_runs(db_path: Path) -> None:
    a_run(fresh(db_path), "read", [1000], [])
    a_run(db_path, "cut-a", [1000], [400, 300])
    a_run(db_path, "cut-b", [], [300])
    result = check(doctor(db_path, now=NOW), "runs.cut_turns")
    assert result.status == "warn", result
    assert result.message.startswith("3 model turn(s) cut short before their replies were read in the last 7 days, "
                                     "1000 tokens billed for them (33% of the model tokens; runs: ")
    assert "cut-a" in result.message and "cut-b" in result.message
    assert "deadline_s" in result.remediation and "gormes runs show RUN" in result.remediation


def test_a_cut_turn_older_than_the_window_is_not_counted(db_path: Path) -> None:
    a_run(fresh(db_path), "old", [], [900])
    sql(db_path, "UPDATE events SET recorded_at = ?", (NOW - 9 * DAY,))
    a_run(db_path, "read", [1000], [])
    assert check(doctor(db_path, now=NOW), "runs.cut_turns").status == "ok"
    # the same log read 8 days earlier: the old cut is in its window
    then = check(doctor(db_path, now=NOW - 8 * DAY, full=True), "runs.cut_turns")
    assert then.status == "warn" and then.message.startswith("1 model turn(s)")


def test_an_incremental_run_counts_what_the_last_one_folded(db_path: Path) -> None:
    a_run(fresh(db_path), "first", [1000], [200])
    assert check(doctor(db_path, now=NOW), "runs.cut_turns").status == "warn"  # kept its summary
    a_run(db_path, "second", [1000], [200])
    report = doctor(db_path, now=NOW)
    result = check(report, "runs.cut_turns")
    assert result.message.startswith("2 model turn(s) cut short before their replies were read in the last 7 days, "
                                     "400 tokens billed for them (17% of the model tokens")
    assert "first" in result.message and "second" in result.message
