"""Keys as a pure function: (state, key) -> (state, action)."""

from __future__ import annotations

import msgspec
from fixtures import ACTIVE, CHILD, DEAD, PAUSED, RUN, WAITING, fixed_snapshot

from gormes.dashboard.keys import Action, UiState, decode_keys, handle_key, sync_rows


def synced() -> UiState:
    return sync_rows(UiState(), fixed_snapshot())


def press(state: UiState, *keys: str) -> tuple[UiState, list[Action]]:
    actions = []
    for key in keys:
        state, action = handle_key(state, key)
        if action is not None:
            actions.append(action)
    return state, actions


def test_decode_keys_splits_arrows_letters_and_control_keys():
    assert decode_keys(b"\x1b[A\x1b[Bjk") == ["up", "down", "j", "k"]
    assert decode_keys(b"\x1bOA\r\t\x7f") == ["up", "enter", "tab", "backspace"]
    assert decode_keys(b"\x1b") == ["esc"]
    assert decode_keys(b"p\x1b[5~q") == ["p", "pageup", "q"]
    assert decode_keys(b"\x1b[99;5Xq") == ["q"]  # an unknown sequence is skipped whole


def test_sync_selects_the_first_job_and_run():
    state = synced()
    assert state.job_ids == (ACTIVE, WAITING, PAUSED, DEAD)
    assert state.selected_job == ACTIVE and state.selected_run == RUN


def test_moving_the_selection_is_clamped():
    state, actions = press(synced(), "down", "j", "down")
    assert state.selected_job == DEAD and actions == []
    state, _ = press(state, "down")
    assert state.selected_job == DEAD
    state, _ = press(state, "up", "k")
    assert state.selected_job == WAITING
    state, _ = press(state, "up", "up", "up")
    assert state.selected_job == ACTIVE
    assert press(state, "G")[0].selected_job == DEAD
    assert press(state, "end", "g")[0].selected_job == ACTIVE


def test_p_r_c_act_on_the_selected_job():
    state, _ = press(synced(), "down", "down")
    assert press(state, "p")[1] == [Action(kind="pause", job_id=PAUSED)]
    assert press(state, "r")[1] == [Action(kind="resume", job_id=PAUSED)]
    assert press(state, "c", "y")[1] == [Action(kind="cancel", job_id=PAUSED)]


def test_in_the_runs_pane_p_acts_on_the_runs_job_and_moves_select_runs():
    state, _ = press(synced(), "tab", "down")
    assert state.pane == "runs" and state.selected_run == CHILD
    assert state.selected_job == ACTIVE  # the jobs selection is untouched
    assert press(state, "p")[1] == [Action(kind="pause", job_id=ACTIVE)]
    assert press(state, "tab")[0].pane == "approvals"  # then back to the jobs
    assert press(state, "tab", "tab")[0].pane == "jobs"


def test_enter_opens_the_selected_run_and_esc_goes_back():
    state, actions = press(synced(), "enter")
    assert actions == [Action(kind="open", run_id=RUN)] and state.timeline == RUN
    state, actions = press(state, "down", "down", "up")
    assert state.scroll == 1 and actions == []
    state, actions = press(state, "p")  # no job commands over a timeline
    assert actions == [] and state.timeline == RUN
    state, _ = press(state, "esc")
    assert state.timeline is None and state.scroll == 0
    state, actions = press(state, "tab", "down", "t")
    assert actions == [Action(kind="open", run_id=CHILD)]


def test_a_job_without_a_run_says_so():
    state, actions = press(synced(), "down", "t")
    assert actions == [] and state.timeline is None
    assert state.message == "this job has no run"
    assert press(state, "down")[0].message == ""


def test_nothing_to_select_gives_a_message_not_an_action():
    empty = msgspec.structs.replace(fixed_snapshot(), jobs=(), runs=())
    state = sync_rows(UiState(), empty)
    state, actions = press(state, "down", "p")
    assert actions == [] and state.message == "no job selected"
    state, actions = press(state, "enter")
    assert actions == [] and state.message == "this job has no run"


def test_q_quits_from_anywhere():
    assert press(synced(), "q")[1] == [Action(kind="quit")]
    assert press(press(synced(), "enter")[0], "q")[1] == [Action(kind="quit")]


def test_sync_keeps_the_selection_on_the_same_job_when_rows_move():
    state, _ = press(synced(), "down", "down")  # PAUSED
    snapshot = fixed_snapshot()
    reordered = msgspec.structs.replace(snapshot, jobs=tuple(reversed(snapshot.jobs)))
    assert sync_rows(state, reordered).selected_job == PAUSED


def test_sync_moves_to_the_row_at_the_old_index_when_the_job_is_gone():
    state, _ = press(synced(), "down", "down", "down")  # DEAD, the last row
    snapshot = fixed_snapshot()
    pruned = msgspec.structs.replace(snapshot, jobs=snapshot.jobs[:3])
    assert sync_rows(state, pruned).selected_job == PAUSED
    state, _ = press(synced(), "down")  # WAITING, index 1
    without = msgspec.structs.replace(snapshot, jobs=(snapshot.jobs[0], *snapshot.jobs[2:]))
    assert sync_rows(state, without).selected_job == PAUSED
