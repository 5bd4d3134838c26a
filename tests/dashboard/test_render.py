"""Rendering a fixed Snapshot: what a person reads on the screen."""

from __future__ import annotations

import os

import msgspec
from fixtures import ACTIVE, CHILD, DEAD, PAUSED, RUN, WAITING, fixed_snapshot
from rich.console import Console

from gormes.dashboard.keys import UiState
from gormes.dashboard.model import Snapshot
from gormes.dashboard.render import render_dashboard, render_timeline, window


def text_of(renderable, width: int = 120) -> str:
    with open(os.devnull, "w") as sink:
        console = Console(record=True, width=width, color_system=None, file=sink)
        console.print(renderable)
        return console.export_text()


def line_with(text: str, needle: str, *, starts: bool = False) -> str:
    lines = [line for line in text.splitlines()
             if (line.startswith(needle) if starts else needle in line)]
    assert len(lines) == 1, (needle, text)
    return lines[0]


def test_header_counts_statuses_tokens_workers_and_breaker():
    text = text_of(render_dashboard(fixed_snapshot()))
    first = text.splitlines()[0]
    assert "head 321" in first
    assert "jobs 7:" in first
    for part in ("waiting 3", "active 1", "paused 2", "dead 1"):
        assert part in first
    assert "delayed" not in first  # statuses with no job are left out
    assert "tokens in/out 1,210/350 (cache 100)" in text
    assert "workers 1 live / 2" in text
    assert "breaker trips 2" in text


def test_queues_table_counts_each_queue():
    text = text_of(render_dashboard(fixed_snapshot()))
    header = line_with(text, "queue ", starts=True)
    assert header.split() == ["queue", "waiting", "active", "paused", "dead", "total"]
    assert line_with(text, "default ", starts=True).split() == ["default", "3", "1", "0", "0", "4"]
    assert line_with(text, "fast ", starts=True).split() == ["fast", "0", "0", "2", "1", "3"]


def test_job_rows_show_status_progress_last_tool_tokens_and_cost():
    text = text_of(render_dashboard(fixed_snapshot()))
    row = line_with(text, ACTIVE)
    for cell in ("agent", "default", "active", "0/3", '{"step":2}', "fs.read", "1,200/345",
                 "$0.0123", "w-1"):
        assert cell in row
    assert line_with(text, WAITING).split()[1:4] == ["echo", "default", "waiting"]
    assert "paused" in line_with(text, PAUSED)
    dead = line_with(text, DEAD)
    assert "dead" in dead and " ? " in dead  # a run with an unpriced model: "?", never $0
    assert line_with(text, WAITING).split()[-2:] == ["0/0", "-"]  # no run, nothing to price


def test_the_selected_job_carries_the_marker():
    text = text_of(render_dashboard(fixed_snapshot(selected=PAUSED)))
    assert line_with(text, PAUSED).startswith(">")
    for other in (ACTIVE, WAITING, DEAD):
        assert not line_with(text, other).startswith(">")
    unselected = text_of(render_dashboard(fixed_snapshot(selected=None)))
    assert not any(line.startswith(">") for line in unselected.splitlines())


def test_active_runs_and_the_runs_pane_selection():
    ui = UiState(pane="runs", selected_run=CHILD)
    text = text_of(render_dashboard(fixed_snapshot(), ui))
    assert "active runs (2)" in text
    run = line_with(text, RUN)
    for cell in ("running", "gpt-x", " 4 ", '"reading', "fs.read", "1,200/345", "$0.0123"):
        assert cell in run
    child = line_with(text, CHILD)
    assert child.startswith(">") and "loca" in child and "fs.grep" in child and " ? " in child
    assert not run.startswith(">")
    # with the runs pane focused, the job row keeps its marker but the runs row is the one steered
    assert line_with(text, ACTIVE + "  agent").startswith(">")


def test_workers_and_governor():
    text = text_of(render_dashboard(fixed_snapshot()))
    alive = line_with(text, "w-1 ", starts=True)
    assert "alive" in alive and "1/8" in alive and "limit 4 cpu 93% mem 50%" in alive
    gone = line_with(text, "w-old")
    assert "gone" in gone and "600s ago" in gone and "not reported" in gone


def test_message_shows_in_the_footer():
    text = text_of(render_dashboard(fixed_snapshot(), UiState(message="01X paused")))
    assert "q quit  01X paused" in text


def test_empty_snapshot_says_so():
    empty = Snapshot(taken_at=0.0, head=0, by_status={}, by_queue=(), jobs=(), runs=(),
                     workers=(), tokens=fixed_snapshot().tokens)
    text = text_of(render_dashboard(empty))
    assert "jobs 0: none" in text
    assert "(no jobs)" in text and "(none)" in text and "(no worker has reported)" in text


def test_height_shows_a_window_that_follows_the_selection():
    base = fixed_snapshot()
    many = tuple(msgspec.structs.replace(base.jobs[1], id=f"01JOB{i:021d}") for i in range(60))
    snapshot = msgspec.structs.replace(base, jobs=many, selected=many[45].id)
    text = text_of(render_dashboard(snapshot, height=40))
    shown = [line for line in text.splitlines() if "01JOB" in line]
    assert 3 <= len(shown) < 60
    assert any(line.startswith(">") and many[45].id in line for line in shown)
    assert "jobs (60 shown, " in text


def test_window_keeps_the_selected_row_in_view():
    assert window(5, 4, 10) == (0, 5)
    assert window(100, 0, 10) == (0, 10)
    assert window(100, 99, 10) == (90, 100)
    start, end = window(100, 50, 10)
    assert start <= 50 < end and end - start == 10


def test_timeline_is_scrolled_and_titled():
    lines = [f"line {i}" for i in range(30)]
    text = text_of(render_timeline(RUN, lines, UiState(timeline=RUN, scroll=5), height=13))
    assert f"run {RUN}  (lines 6-15 of 30)" in text
    assert "line 5" in text and "line 14" in text
    assert "line 4\n" not in text and "line 15" not in text
    assert "esc back" in text


def test_a_run_whose_process_is_gone_reads_as_cut_off():
    snapshot = fixed_snapshot()
    runs = tuple(msgspec.structs.replace(r, process="gone" if r.run_id == RUN else "alive")
                 for r in snapshot.runs)
    text = text_of(render_dashboard(msgspec.structs.replace(snapshot, runs=runs), UiState()))
    assert "cut off" in line_with(text, RUN)
    assert "cut off" not in line_with(text, CHILD) and "running" in line_with(text, CHILD)
