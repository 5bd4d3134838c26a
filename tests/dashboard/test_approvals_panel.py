"""`gormes top`'s approvals panel and budgets line: the pure keys and drawing, the
incremental reads, and a request approved and one denied from the keyboard task,
through the audited operations."""

from __future__ import annotations

import io

import msgspec
import trio
from fixtures import RUN, fixed_snapshot
from rich.console import Console
from test_steer_keys import press, typed
from test_top_steering import Top, audits, drive, screen

from gormes.actors.runs.approval_book import read_approvals
from gormes.control.budget_book import BudgetBook
from gormes.dashboard.control import ApprovalRow, BudgetRow, ControlWatch, budget_text
from gormes.dashboard.keys import Action, Draft, UiState, sync_rows
from gormes.dashboard.render import render_dashboard
from gormes.events.approvals import APPROVALS_STREAM, ApprovalDecided, ApprovalRequested
from gormes.events.open import open_store
from gormes.events.budgets import BudgetReserved, BudgetSettled, budget_stream
from gormes.events.jobs import Tokens
from gormes.providers.pricing import PricingTable

A1, A2 = "01APPROVALONE0000000000000", "01APPROVALTWO0000000000000"
OTHER_RUN = "01RUNASKING000000000000000"


def with_control() -> msgspec.Struct:
    return msgspec.structs.replace(fixed_snapshot(), approvals=(
        ApprovalRow(id=A1, operation="shell.run", run_id=RUN, job_id="01JOBACTIVE000000000000000", caller=f"run-{RUN}",
                    trust="operator", why="deployment rule 'shell.*'", age_s=75.0, expires_in_s=3525.0),
        ApprovalRow(id=A2, operation="payments.send", run_id=OTHER_RUN, job_id=None, caller=f"run-{OTHER_RUN}",
                    trust="gateway", why="its spec requires approval", age_s=5.0),
    ), budgets=(
        BudgetRow(id="team-a", policy="stop", spent_tokens=1200, held_tokens=300, tokens_cap=5000,
                  spent_cost=None, held_cost=None, cost_cap=None),
        BudgetRow(id="job:01J", policy="pause", spent_tokens=10, held_tokens=0, tokens_cap=None,
                  spent_cost=1.0, held_cost=0.0, cost_cap=1.0, paused_jobs=1, refused=2),
    ))


def text_of(renderable, width: int = 160) -> str:
    console = Console(record=True, width=width, color_system=None, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def synced() -> UiState:
    return sync_rows(UiState(), with_control())


def test_tab_reaches_the_approvals_and_a_approves_the_selected_one_with_its_reason():
    state, _ = press(synced(), "tab", "tab")
    assert state.pane == "approvals" and state.selected_approval == A1
    state, _ = press(state, "down")
    assert state.selected_approval == A2
    state, actions = press(state, "a")
    assert actions == [] and state.draft == Draft(approval_id=A2, decision="approve")
    state, actions = typed(state, "paid before, q")  # every key is text, q too
    assert actions == [] and state.draft.text == "paid before, q"
    state, actions = press(state, "enter")
    assert actions == [Action(kind="approve", approval_id=A2, text="paid before, q")]
    assert state.draft is None


def test_d_denies_and_a_decision_needs_a_reason():
    state, _ = press(synced(), "tab", "tab", "d")
    assert state.draft == Draft(approval_id=A1, decision="deny")
    state, actions = press(state, " ", "enter")
    assert actions == [] and state.message == f"approval {A1} not decided: a decision needs a reason"
    state, actions = press(state, "d", "x", "esc")
    assert actions == [] and state.message == f"approval {A1} not decided"
    state, actions = typed(press(state, "d")[0], "not on a Friday\r")
    assert actions == [Action(kind="deny", approval_id=A1, text="not on a Friday")]


def test_a_and_d_act_only_in_the_approvals_pane_and_say_so():
    state, actions = press(synced(), "a")
    assert actions == [] and state.draft is None and "in the approvals pane" in state.message
    empty = sync_rows(UiState(), fixed_snapshot())
    state, actions = press(empty, "tab", "tab", "a")
    assert actions == [] and state.message == "no approval pending"


def test_in_the_approvals_pane_enter_opens_the_asking_run_and_m_writes_to_it():
    state, actions = press(synced(), "tab", "tab", "down", "enter")
    assert actions == [Action(kind="open", run_id=OTHER_RUN)]
    state, actions = press(synced(), "tab", "tab", "m")
    assert state.draft == Draft(run_id=RUN)


def test_the_panel_and_the_budgets_line_are_drawn_and_the_panel_only_when_needed():
    ui = press(synced(), "tab", "tab")[0]
    text = text_of(render_dashboard(with_control(), ui))
    assert "approvals pending (2)" in text
    [line] = [ln for ln in text.splitlines() if A1 in ln]
    assert line.startswith(f"> {A1}")  # the selected row's marker
    for cell in ("shell.run", "01JOBACTIVE", f"run-{RUN} (operator)", "75s", "59m left", "deployment rule"):
        assert cell in line, cell
    assert "budgets: team-a 1,200/5,000 tok (held 300)" in text
    assert "job:01J 10/no cap tok" not in text and "job:01J $1.0000/$1.0000 1 paused" in text
    plain = text_of(render_dashboard(fixed_snapshot()))
    assert "approvals pending" not in plain and "budgets:" not in plain
    assert "(none pending)" in text_of(render_dashboard(fixed_snapshot(), press(sync_rows(
        UiState(), fixed_snapshot()), "tab", "tab")[0]))


def test_a_budgets_text_says_spent_cap_and_held():
    row = BudgetRow(id="both", policy="stop", spent_tokens=5, held_tokens=0, tokens_cap=100, spent_cost=None,
                    held_cost=0.5, cost_cap=2.0)
    assert budget_text(row) == "both 5/100 tok, ?/$2.0000 (held $0.5000)"


async def test_the_watch_reads_what_is_new_and_shows_only_pending_requests(store):
    watch = ControlWatch(store)
    table = PricingTable({})
    assert await watch.read(now=10.0, pricing=table) == ((), ())
    for approval_id, at in ((A1, 1000), (A2, 2000)):
        await store.append(APPROVALS_STREAM, [ApprovalRequested(
            approval_id=approval_id, operation="shell.run", arguments="{}", args_hash="h", run_id=RUN,
            caller=f"run-{RUN}", trust="operator", why="rule", at=at, expires_at=at + 60_000)])
    book = BudgetBook(store, pricing=table)
    await book.set("team-a", tokens=500)
    approvals, budgets = await watch.read(now=10.0, pricing=table)
    assert [(a.id, a.age_s, a.expires_in_s) for a in approvals] == [(A1, 9.0, 51.0), (A2, 8.0, 52.0)]
    assert [(b.id, b.spent_tokens, b.held_tokens, b.tokens_cap) for b in budgets] == [("team-a", 0, 0, 500)]

    await store.append(APPROVALS_STREAM, [ApprovalDecided(approval_id=A1, decision="approved", by="operator:cli",
                                                          at=3000)])
    await store.append(budget_stream("team-a"), [
        BudgetReserved(hold_id="h1", run_id=RUN, model="m", tokens=Tokens(input=100), expires_at=10**13, at=3000),
        BudgetReserved(hold_id="h2", run_id=RUN, model="m", tokens=Tokens(input=40), expires_at=10**13, at=3000),
        BudgetSettled(hold_id="h1", used=Tokens(input=20, output=10), at=3001),
    ])
    await book.set("b-two", tokens=7)
    approvals, budgets = await watch.read(now=10.0, pricing=table)
    assert [a.id for a in approvals] == [A2]
    assert [(b.id, b.spent_tokens, b.held_tokens) for b in budgets] == [("b-two", 0, 0), ("team-a", 30, 40)]
    # what a fresh watch folds from the whole streams is what the incremental one has
    assert await ControlWatch(store).read(now=10.0, pricing=table) == (approvals, budgets)


async def test_approve_and_deny_from_the_keyboard_go_through_the_audited_operations(tmp_path):
    db = tmp_path / "top.db"
    async with open_store(db) as store:
        for approval_id, at in ((A1, 1000), (A2, 2000)):
            await store.append(APPROVALS_STREAM, [ApprovalRequested(
                approval_id=approval_id, operation="shell.run", arguments="{}", args_hash="h", run_id=RUN,
                caller=f"run-{RUN}", trust="operator", why="deployment rule 'shell.*'", at=at)])
        await BudgetBook(store).set("team-a", tokens=500)

        async def body(top: Top) -> None:
            app = top.app
            await app.reload()
            shown = screen(app)
            assert "approvals pending (2)" in shown and "budgets: team-a 0/500 tok" in shown
            await top.keys(b"\t\ta")
            assert app.ui.draft == Draft(approval_id=A1, decision="approve")
            await top.keys(b"looked at it\r")
            assert app.ui.message == f"approval {A1} approved: shell.run for run {RUN}"
            # not refreshed yet: A1 is still listed and selected; deciding it again is refused, one line
            await top.keys(b"dtwice\r")
            assert app.ui.message == f"not decided: approval {A1} is not pending: approved by operator:cli"
            await app.reload()  # A1 is gone; the selection moves to A2
            assert app.ui.selected_approval == A2
            await top.keys(b"dno\r")
            decided = await read_approvals(store)
            assert (decided[A1].status, decided[A1].decision.by, decided[A1].decision.reason) == (
                "approved", "operator:cli", "looked at it")
            assert (decided[A2].status, decided[A2].decision.reason) == ("denied", "no")
            await app.reload()
            assert "(none pending)" in screen(app)  # none pending; the pane keeps the focus

        with trio.fail_after(60):
            await drive(store, body)
    decisions = [(a["operation"], a["outcome"], a["trust"], a["caller"]) for a in audits(db)
                 if a["operation"].startswith("approval.")]
    assert decisions == [("approval.approve", "ok", "operator", "cli"), ("approval.deny", "invalid", "operator", "cli"),
                         ("approval.deny", "ok", "operator", "cli")]
