"""Typing a message and confirming a cancel, as pure key handling."""

from __future__ import annotations

import msgspec
from fixtures import ACTIVE, CHILD, PAUSED, RUN, fixed_snapshot

from gormes.dashboard.keys import Action, Draft, UiState, decode_keys, handle_key, sync_rows


def synced() -> UiState:
    return sync_rows(UiState(), fixed_snapshot())


def press(state: UiState, *keys: str) -> tuple[UiState, list[Action]]:
    actions = []
    for key in keys:
        state, action = handle_key(state, key)
        if action is not None:
            actions.append(action)
    return state, actions


def typed(state: UiState, text: str) -> tuple[UiState, list[Action]]:
    return press(state, *decode_keys(text.encode()))


def test_m_in_the_runs_pane_writes_to_the_selected_runs_inbox():
    state, actions = press(synced(), "tab", "down", "m")
    assert actions == [] and state.draft == Draft(run_id=CHILD)
    # every key is text while typing: q does not quit, p does not pause, j does not move
    state, actions = typed(state, "stop, quit. jp")
    assert actions == [] and state.draft.text == "stop, quit. jp" and state.selected_run == CHILD
    state, _ = press(state, "backspace", "backspace", "up", "tab")  # arrows and tab are not text
    assert state.draft.text == "stop, quit. " and state.pane == "runs"
    state, actions = press(state, "enter")
    assert actions == [Action(kind="send", run_id=CHILD, text="stop, quit. ")]
    assert state.draft is None and "sending to run" in state.message
    assert press(state, "q")[1] == [Action(kind="quit")]  # keys are keys again


def test_m_in_the_jobs_pane_writes_to_the_selected_jobs_inbox():
    state, _ = press(synced(), "m")
    assert state.draft == Draft(job_id=ACTIVE)
    state, actions = typed(state, "use the cache\r")
    assert actions == [Action(kind="send", job_id=ACTIVE, text="use the cache")]


def test_m_over_a_timeline_writes_to_that_run():
    state, actions = press(synced(), "enter", "m", "h", "i", "enter")
    assert actions == [Action(kind="open", run_id=RUN), Action(kind="send", run_id=RUN, text="hi")]
    assert state.timeline == RUN  # still over the timeline, to watch it read


def test_esc_drops_a_message_and_an_empty_one_is_not_sent():
    state, actions = press(synced(), "m", "x", "esc")
    assert actions == [] and state.draft is None and state.message == "message dropped"
    state, actions = press(state, "m", " ", "enter")
    assert actions == [] and state.draft is None and state.message == "nothing to send"


def test_typed_text_may_be_any_language():
    state, _ = typed(press(synced(), "m")[0], "arrête — 停")
    assert state.draft.text == "arrête — 停"
    assert decode_keys("é".encode()) == ["é"]


def test_with_nothing_selected_m_says_so():
    empty = sync_rows(UiState(), msgspec.structs.replace(fixed_snapshot(), jobs=(), runs=()))
    assert press(empty, "m")[0].message == "no job selected"
    assert press(empty, "tab", "m")[0].message == "no run selected"


def test_cancel_asks_first_and_only_y_cancels():
    state, _ = press(synced(), "down", "down")  # PAUSED
    state, actions = press(state, "c")
    assert actions == [] and state.confirm_cancel == PAUSED
    assert state.message == f"cancel job {PAUSED} and its live children? y/n"
    yes, actions = press(state, "y")
    assert actions == [Action(kind="cancel", job_id=PAUSED)] and yes.confirm_cancel is None
    for key in ("n", "esc", "q", "c", "enter"):  # anything but y keeps the job; q does not quit either
        no, actions = press(state, key)
        assert actions == [] and no.confirm_cancel is None
        assert no.message == f"job {PAUSED} not cancelled"


def test_cancel_in_the_runs_pane_confirms_the_runs_job():
    state, actions = press(synced(), "tab", "c", "Y")
    assert actions == [Action(kind="cancel", job_id=ACTIVE)]
