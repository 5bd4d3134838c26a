"""Keys of `gormes top`, as pure functions: bytes -> key names, (state, key) -> (state, action).

    state, action = handle_key(state, "p")   # Action(kind="pause", job_id=...) or None

The live loop (app.py) carries the state, performs the action (through the
JobQueue, as the operator) and renders; nothing here does I/O.

Main view: up/k, down/j, home/g, end/G move; tab goes from the jobs to the
active runs to the pending approvals and back; p pause, r resume, c cancel the
selected job (in the runs pane: the run's job), after a y/n confirmation (any key
but y keeps it); enter/t open the selected run's timeline (in the approvals pane:
the asking run's); m write a message; in the approvals pane a approve, d deny the
selected request, each after typing its reason; q quit.
Timeline view: up/k, down/j scroll; esc, backspace, left, t or enter go back;
m write a message to this run; q quit.

A message goes to the selected run's inbox (runs pane, timeline: run.send) or the
selected job's (jobs pane: job.send; an agent job's run reads it at its next
inbox read too). While one is typed every key is text: enter sends it (Action
"send"), esc drops it, backspace deletes a character. A reason for an approval's
decision is typed the same way; enter decides (Action "approve" or "deny", the
reason as its text); an empty reason decides nothing.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from gormes.dashboard.model import Receipt, Snapshot

Pane = Literal["jobs", "runs", "approvals"]
PANES: tuple[Pane, ...] = ("jobs", "runs", "approvals")
ActionKind = Literal["pause", "resume", "cancel", "open", "send", "approve", "deny", "quit"]
MAX_MESSAGE = 4000  # characters typed into one message

_SEQUENCES = {
    b"\x1b[A": "up", b"\x1b[B": "down", b"\x1b[C": "right", b"\x1b[D": "left",
    b"\x1bOA": "up", b"\x1bOB": "down", b"\x1bOC": "right", b"\x1bOD": "left",
    b"\x1b[H": "home", b"\x1b[F": "end", b"\x1b[1~": "home", b"\x1b[4~": "end",
    b"\x1b[5~": "pageup", b"\x1b[6~": "pagedown",
}
_SINGLE = {b"\r": "enter", b"\n": "enter", b"\t": "tab", b"\x7f": "backspace", b"\x08": "backspace"}


def decode_keys(data: bytes) -> list[str]:
    """Split what the terminal sent (one read, cbreak mode) into key names."""
    keys: list[str] = []
    i = 0
    while i < len(data):
        if data[i:i + 1] == b"\x1b":
            for seq, name in _SEQUENCES.items():
                if data.startswith(seq, i):
                    keys.append(name)
                    i += len(seq)
                    break
            else:
                if data[i + 1:i + 2] == b"[":  # an unknown CSI sequence: skip it whole
                    j = i + 2
                    while j < len(data) and not 0x40 <= data[j] <= 0x7E:
                        j += 1
                    i = j + 1
                else:
                    keys.append("esc")
                    i += 1
            continue
        byte = data[i:i + 1]
        if byte in _SINGLE or data[i] < 0x80:
            keys.append(_SINGLE.get(byte) or byte.decode("latin-1"))
            i += 1
            continue
        # UTF-8 text (a message being typed): one key per character
        width = 2 if data[i] >= 0xC0 else 1
        width = 3 if data[i] >= 0xE0 else width
        width = 4 if data[i] >= 0xF0 else width
        try:
            keys.append(data[i:i + width].decode("utf-8"))
        except UnicodeDecodeError:
            keys.append(byte.decode("latin-1"))
            width = 1
        i += width
    return keys


class Action(msgspec.Struct, frozen=True, kw_only=True):
    kind: ActionKind
    job_id: str | None = None
    run_id: str | None = None
    text: str | None = None  # a message's text (kind "send": to run_id, else to job_id), or a decision's reason
    approval_id: str | None = None  # kinds "approve" and "deny": the request decided


class Draft(msgspec.Struct, frozen=True, kw_only=True):
    """A message being typed, and where it goes (a run's inbox, else a job's); or
    the reason of a decision (`decision`) on the approval request `approval_id`."""

    run_id: str | None = None
    job_id: str | None = None
    text: str = ""
    approval_id: str | None = None
    decision: Literal["approve", "deny"] | None = None

    @property
    def target(self) -> str:
        if self.approval_id is not None:
            return f"{self.decision} {self.approval_id}, because"
        return f"run {self.run_id}" if self.run_id is not None else f"job {self.job_id}"


class UiState(msgspec.Struct, frozen=True, kw_only=True):
    pane: Pane = "jobs"
    job_ids: tuple[str, ...] = ()
    job_runs: tuple[str | None, ...] = ()  # each job's top-level run
    run_ids: tuple[str, ...] = ()
    run_jobs: tuple[str | None, ...] = ()  # each run's job
    approval_ids: tuple[str, ...] = ()  # the pending approval requests
    approval_runs: tuple[str | None, ...] = ()  # each request's run (None: a call outside any run)
    selected_job: str | None = None
    selected_run: str | None = None
    selected_approval: str | None = None
    timeline: str | None = None  # the run whose timeline is open
    scroll: int = 0  # first timeline line shown
    message: str = ""
    draft: Draft | None = None  # a message being typed
    confirm_cancel: str | None = None  # the job whose cancel waits for y/n
    receipt: Receipt | None = None  # the last message sent, read or not


def _keep(ids: tuple[str, ...], old_ids: tuple[str, ...], selected: str | None) -> str | None:
    """The same id if it is still there; else the row now at its old index (clamped)."""
    if not ids:
        return None
    if selected in ids:
        return selected
    index = old_ids.index(selected) if selected in old_ids else 0
    return ids[min(index, len(ids) - 1)]


def sync_rows(state: UiState, snapshot: Snapshot) -> UiState:
    """Take the rows of a new snapshot, keeping the selection on the same job and run."""
    job_ids = tuple(j.id for j in snapshot.jobs)
    run_ids = tuple(r.run_id for r in snapshot.runs)
    approval_ids = tuple(a.id for a in snapshot.approvals)
    return msgspec.structs.replace(
        state,
        job_ids=job_ids, job_runs=tuple(j.run_id for j in snapshot.jobs),
        run_ids=run_ids, run_jobs=tuple(r.job_id for r in snapshot.runs),
        approval_ids=approval_ids, approval_runs=tuple(a.run_id for a in snapshot.approvals),
        selected_job=_keep(job_ids, state.job_ids, state.selected_job),
        selected_run=_keep(run_ids, state.run_ids, state.selected_run),
        selected_approval=_keep(approval_ids, state.approval_ids, state.selected_approval),
    )


def _move(ids: tuple[str, ...], selected: str | None, key: str) -> str | None:
    if not ids:
        return None
    index = ids.index(selected) if selected in ids else 0
    step = {"up": -1, "k": -1, "down": 1, "j": 1, "pageup": -10, "pagedown": 10}
    if key in ("home", "g"):
        index = 0
    elif key in ("end", "G"):
        index = len(ids) - 1
    else:
        index = max(0, min(len(ids) - 1, index + step[key]))
    return ids[index]


def _selected_job(state: UiState) -> str | None:
    if state.pane == "jobs":
        return state.selected_job
    if state.pane == "approvals":
        return None
    if state.selected_run in state.run_ids:
        return state.run_jobs[state.run_ids.index(state.selected_run)]
    return None


def _selected_run(state: UiState) -> str | None:
    if state.pane == "runs":
        return state.selected_run
    if state.pane == "approvals":
        if state.selected_approval in state.approval_ids:
            return state.approval_runs[state.approval_ids.index(state.selected_approval)]
        return None
    if state.selected_job in state.job_ids:
        return state.job_runs[state.job_ids.index(state.selected_job)]
    return None


_MOVES = frozenset({"up", "down", "k", "j", "home", "end", "g", "G", "pageup", "pagedown"})
_BACK = frozenset({"esc", "backspace", "left", "t", "enter"})


def _typing(state: UiState, draft: Draft, key: str) -> tuple[UiState, Action | None]:
    replace = msgspec.structs.replace
    if key == "esc":
        if draft.approval_id is not None:
            return replace(state, draft=None, message=f"approval {draft.approval_id} not decided"), None
        return replace(state, draft=None, message="message dropped"), None
    if key == "enter":
        if draft.approval_id is not None:
            if not draft.text.strip():
                return replace(state, draft=None, message=f"approval {draft.approval_id} not decided: "
                               "a decision needs a reason"), None
            return replace(state, draft=None, message=f"{draft.decision} {draft.approval_id}"), Action(
                kind=draft.decision or "deny", approval_id=draft.approval_id, text=draft.text.strip())
        if not draft.text.strip():
            return replace(state, draft=None, message="nothing to send"), None
        return replace(state, draft=None, message=f"sending to {draft.target}"), Action(
            kind="send", run_id=draft.run_id, job_id=None if draft.run_id else draft.job_id, text=draft.text)
    if key == "backspace":
        return replace(state, draft=replace(draft, text=draft.text[:-1])), None
    if len(key) == 1 and key.isprintable() and len(draft.text) < MAX_MESSAGE:
        return replace(state, draft=replace(draft, text=draft.text + key)), None
    return state, None  # arrows, tab, control keys: not text


def _confirming(state: UiState, job_id: str, key: str) -> tuple[UiState, Action | None]:
    replace = msgspec.structs.replace
    if key in ("y", "Y"):
        return replace(state, confirm_cancel=None, message=""), Action(kind="cancel", job_id=job_id)
    return replace(state, confirm_cancel=None, message=f"job {job_id} not cancelled"), None


def _compose(state: UiState) -> tuple[UiState, Action | None]:
    replace = msgspec.structs.replace
    if state.timeline is not None:
        return replace(state, draft=Draft(run_id=state.timeline), message=""), None
    if state.pane in ("runs", "approvals"):
        run_id = _selected_run(state)
        if run_id is None:
            return replace(state, message="no run selected"), None
        return replace(state, draft=Draft(run_id=run_id), message=""), None
    if state.selected_job is None:
        return replace(state, message="no job selected"), None
    return replace(state, draft=Draft(job_id=state.selected_job), message=""), None


def handle_key(state: UiState, key: str) -> tuple[UiState, Action | None]:
    replace = msgspec.structs.replace
    if state.draft is not None:
        return _typing(state, state.draft, key)
    if state.confirm_cancel is not None:
        return _confirming(state, state.confirm_cancel, key)
    if key == "q":
        return state, Action(kind="quit")
    if key == "m":
        return _compose(state)
    if state.timeline is not None:
        if key in _BACK:
            return replace(state, timeline=None, scroll=0, message=""), None
        delta = {"up": -1, "k": -1, "down": 1, "j": 1, "pageup": -10, "pagedown": 10}.get(key)
        if delta is not None:
            return replace(state, scroll=max(0, state.scroll + delta)), None
        if key in ("home", "g"):
            return replace(state, scroll=0), None
        return state, None
    if key in _MOVES:
        if state.pane == "jobs":
            return replace(state, selected_job=_move(state.job_ids, state.selected_job, key), message=""), None
        if state.pane == "approvals":
            return replace(state, selected_approval=_move(state.approval_ids, state.selected_approval, key),
                           message=""), None
        return replace(state, selected_run=_move(state.run_ids, state.selected_run, key), message=""), None
    if key == "tab":
        return replace(state, pane=PANES[(PANES.index(state.pane) + 1) % len(PANES)], message=""), None
    if key in ("a", "d"):
        if state.pane != "approvals":
            return replace(state, message="a approve, d deny: in the approvals pane (tab)"), None
        if state.selected_approval is None:
            return replace(state, message="no approval pending"), None
        decision: Literal["approve", "deny"] = "approve" if key == "a" else "deny"
        return replace(state, draft=Draft(approval_id=state.selected_approval, decision=decision), message=""), None
    if key in ("p", "r", "c"):
        job_id = _selected_job(state)
        if job_id is None:
            what = {"jobs": "no job selected", "runs": "this run has no job"}.get(state.pane, "no job selected")
            return replace(state, message=what), None
        if key == "c":
            return replace(state, confirm_cancel=job_id,
                           message=f"cancel job {job_id} and its live children? y/n"), None
        kind: ActionKind = {"p": "pause", "r": "resume"}[key]  # type: ignore[assignment]
        return state, Action(kind=kind, job_id=job_id)
    if key in ("enter", "t"):
        run_id = _selected_run(state)
        if run_id is None:
            what = "this job has no run" if state.pane == "jobs" else "no run selected"
            return replace(state, message=what), None
        return replace(state, timeline=run_id, scroll=0, message=""), Action(kind="open", run_id=run_id)
    return state, None
