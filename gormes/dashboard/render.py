"""Drawing a `Snapshot` as rich renderables: pure, no I/O, no clock.

    console.print(render_dashboard(snapshot, ui, height=40))
    console.print(render_timeline(lines, ui, height=40))

The selected job (and, in the runs pane, the selected run) carries the `>` marker
and reverse video. Every string from the log (names, queues, tools, ids: a gateway
may have chosen them) becomes `Text` through `printable`, so neither a control
sequence nor `[bold]`-like markup in it reaches the terminal as such. Cost is "-" where there is no run to price and "?" where a
model has no price (never $0 for an unknown price).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gormes.dashboard.control import approval_cells, budgets_line
from gormes.dashboard.gateway import gateway_line
from gormes.dashboard.keys import UiState
from gormes.dashboard.model import JobRow, Receipt, RunRow, Snapshot, WorkerRow, governor_log
from gormes.dashboard.providers import provider_cells
from gormes.events.jobs import STATUSES, Tokens
from gormes.printable import printable
from gormes.providers import pricing

MARKER = ">"
STATUS_STYLE = {
    "active": "bold green", "waiting": "cyan", "delayed": "blue", "paused": "yellow",
    "waiting-children": "magenta", "completed": "dim green", "failed": "red", "dead": "bold red",
    "cancelled": "dim", "running": "bold green", "suspended": "yellow",
}
SHORT_STATUS = {"waiting-children": "w-child"}
KEYS_HELP = "up/down select  tab pane  p pause  r resume  c cancel  m message  enter timeline  a/d approve/deny  q quit"
TIMELINE_HELP = "up/down scroll  m message  esc back  q quit"
DRAFT_HELP = "enter send  esc drop"
# header, titles, table headers, footer and its receipt line: what the job rows must leave room for
FIXED_LINES = 16
GOVERNOR_ROWS = 5


def format_cost(dollars: float | None, *, priced: bool = True) -> str:
    """As the other commands show a cost, but short: "?" for an unknown price."""
    if not priced:
        return "-"
    return "?" if dollars is None else pricing.format_cost(dollars)


def format_tokens(tokens: Tokens) -> str:
    return f"{tokens.input:,}/{tokens.output:,}"


def _status(status: str) -> Text:
    return Text(printable(SHORT_STATUS.get(status, status)), style=STATUS_STYLE.get(status, ""))


def _texts(cells: Sequence[RenderableType]) -> list[RenderableType]:
    """Table cells with every plain string made inert text (no markup, no controls)."""
    return [Text(printable(cell)) if isinstance(cell, str) else cell for cell in cells]


def window(count: int, selected: int, size: int) -> tuple[int, int]:
    """The [start, end) of `size` rows out of `count` that keeps `selected` in view."""
    size = max(1, size)
    if count <= size:
        return 0, count
    start = min(max(0, selected - size // 2), count - size)
    return start, start + size


def header(snapshot: Snapshot) -> Text:
    s = snapshot
    text = Text("gormes top", style="bold")
    text.append(f"  head {s.head}  jobs {s.total_jobs}: ")
    parts = [(status, n) for status, n in s.by_status.items() if n]
    for i, (status, n) in enumerate(parts):
        text.append(f"{'  ' if i else ''}{printable(status)} ")
        text.append(str(n), style=STATUS_STYLE.get(status, ""))
    if not parts:
        text.append("none")
    text.append(f"\ntokens in/out {format_tokens(s.tokens)} (cache {s.tokens.cache_read:,})")
    text.append(f"  cost {format_cost(s.cost)} wasted {format_cost(s.wasted_cost)} (pricing {printable(s.pricing)})")
    text.append(f"  workers {s.live_workers} live / {len(s.workers)}")
    text.append(f"  breaker trips {s.breaker_trips}", style="bold red" if s.breaker_trips else "")
    return text


def _table(title: str, *, focused: bool = False) -> Table:
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                 pad_edge=False, padding=(0, 1), collapse_padding=True, header_style="bold",
                 title_style="bold underline" if focused else "bold")


ALWAYS_SHOWN = ("waiting", "active")


def queues_table(snapshot: Snapshot) -> Table:
    """One row per queue; a status column only where some queue has such jobs."""
    shown = [s for s in STATUSES if s in ALWAYS_SHOWN or snapshot.by_status.get(s)]
    table = _table("queues")
    table.add_column("queue", no_wrap=True)
    for status in shown:
        table.add_column(SHORT_STATUS.get(status, status), justify="right", no_wrap=True)
    table.add_column("total", justify="right", no_wrap=True)
    for q in snapshot.by_queue:
        table.add_row(*_texts([q.queue, *(str(q.counts.get(s, 0)) for s in shown), str(q.total)]))
    if not snapshot.by_queue:
        table.add_row("(no jobs)", *("" for _ in shown), "0")
    return table


def jobs_table(snapshot: Snapshot, *, focused: bool, rows: int | None = None) -> Table:
    jobs = snapshot.jobs
    index = next((i for i, j in enumerate(jobs) if j.id == snapshot.selected), 0)
    start, end = window(len(jobs), index, rows if rows is not None else len(jobs))
    title = f"jobs ({len(jobs)} shown" + (f", {start + 1}-{end}" if end - start < len(jobs) else "") + ")"
    table = _table(title, focused=focused)
    _columns(table, ("  id", 28), ("name", 4), ("queue", 5), ("status", 9), ("try", 3),
             ("progress", 8), ("last tool", 9), ("tokens", 9), ("cost", 7), ("worker", 6))
    for job in jobs[start:end]:
        table.add_row(*_texts(_job_cells(job, job.id == snapshot.selected)),
                      style="reverse" if job.id == snapshot.selected and focused else None)
    if not jobs:
        table.add_row("  (no jobs)")
    return table


RIGHT = frozenset({"try", "tokens", "cost", "depth", "turns", "pid", "active"})


def _columns(table: Table, *columns: tuple[str, int]) -> None:
    """Columns that never wrap; each keeps at least its minimum width when space is short."""
    for name, min_width in columns:
        table.add_column(name, justify="right" if name in RIGHT else "left", no_wrap=True,
                         overflow="ellipsis", min_width=min_width)


def _marked(row_id: str, selected: bool) -> str:
    """The id cell, led by the marker on the selected row (one cell: it cannot be squeezed away)."""
    return f"{MARKER if selected else ' '} {row_id}"


def _job_cells(job: JobRow, selected: bool) -> list[RenderableType]:
    return [
        _marked(job.id, selected), job.name, job.queue, _status(job.status),
        f"{job.attempts_made}/{job.max_attempts}", job.progress or "", job.last_tool or "",
        format_tokens(job.tokens), format_cost(job.cost, priced=job.run_id is not None),
        job.worker_id or "",
    ]


def runs_table(snapshot: Snapshot, ui: UiState) -> Table:
    focused = ui.pane == "runs"
    table = _table(f"active runs ({len(snapshot.runs)})", focused=focused)
    _columns(table, ("  run", 28), ("handler", 7), ("status", 9), ("model", 5),
             ("turns", 5), ("progress", 8), ("last tool", 9), ("tokens", 9), ("cost", 7), ("job", 8))
    for run in snapshot.runs:
        selected = focused and run.run_id == ui.selected_run
        table.add_row(*_texts(_run_cells(run, selected)), style="reverse" if selected else None)
    if not snapshot.runs:
        table.add_row("  (none)")
    return table


def _run_cells(run: RunRow, selected: bool) -> list[RenderableType]:
    return [
        _marked(run.run_id, selected),
        run.handler if run.depth == 0 else f"{run.handler} (d{run.depth})",
        Text("cut off", style="bold red") if run.process == "gone" else _status(run.status),
        run.model or "", str(run.iterations), run.progress or "", run.last_tool or "",
        format_tokens(run.tokens), format_cost(run.cost), run.job_id or "",
    ]


def workers_table(snapshot: Snapshot) -> Table:
    table = _table(f"workers ({snapshot.live_workers} live)")
    _columns(table, ("worker", 12), ("state", 5), ("seen", 7), ("pid", 3), ("active", 6),
             ("queues", 6), ("governor", 8))
    for w in snapshot.workers:
        table.add_row(*_texts(_worker_cells(w)))
    if not snapshot.workers:
        table.add_row("(no worker has reported)")
    return table


def _worker_cells(w: WorkerRow) -> list[RenderableType]:
    state = Text("alive", style="green") if w.alive else Text("gone", style="red")
    limit = f"/{w.concurrency}" if w.concurrency is not None else ""
    g = w.governor
    if g is None:
        governor = "not reported"
    else:
        governor = f"limit {g.limit if g.limit is not None else '?'}"
        if g.cpu_percent is not None:
            governor += f" cpu {g.cpu_percent:.0f}%" + (f" ({g.cpu})" if g.cpu else "")
        if g.memory_percent is not None:
            governor += f" mem {g.memory_percent:.0f}%"
    return [
        w.worker_id, state, f"{w.last_seen_s_ago:.0f}s ago", "" if w.pid is None else str(w.pid),
        f"{w.active_jobs}{limit}", ",".join(w.queues) if w.queues else "all", governor,
    ]


def approvals_table(snapshot: Snapshot, ui: UiState) -> list[Table]:
    """The pending approval requests, oldest first: shown while there are any, or
    while its pane has the focus (a and d decide the selected one)."""
    focused = ui.pane == "approvals"
    if not snapshot.approvals and not focused:
        return []
    table = _table(f"approvals pending ({len(snapshot.approvals)})", focused=focused)
    _columns(table, ("  approval", 28), ("operation", 9), ("job/run", 8), ("who", 8), ("age", 3),
             ("timeout", 7), ("why", 10))
    for row in snapshot.approvals:
        selected = focused and row.id == ui.selected_approval
        table.add_row(*approval_cells(row, MARKER if selected else " "), style="reverse" if selected else None)
    if not snapshot.approvals:
        table.add_row("  (none pending)")
    return [table]


def providers_table(snapshot: Snapshot) -> list[Table]:
    """Each provider limit key: the outage guard, a back-off, the last minute's leases
    (none shown until a model turn went through the limits)."""
    if not snapshot.providers:
        return []
    table = _table("providers: shared limits and the outage guard")
    _columns(table, ("key", 12), ("state", 6), ("now", 10), ("last minute", 11), ("last error", 10))
    for row in snapshot.providers:
        table.add_row(*provider_cells(row))
    return [table]


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def governor_table(snapshot: Snapshot) -> Table:
    """The governors' recent limit changes and breaker trips, newest first, and why;
    with none yet, each live governor's current limit and the reason for it."""
    table = _table("governor: recent decisions and why")
    _columns(table, ("when", 7), ("worker", 12), ("limit", 5), ("why", 20))
    changes = governor_log(snapshot.workers, GOVERNOR_ROWS)
    for worker_id, c in changes:
        limit = f"{c.previous} -> {c.limit}" if c.limit != c.previous else str(c.limit)
        table.add_row(*_texts([_ago(snapshot.taken_at - c.at), worker_id, limit, c.reason]),
                      style="bold red" if c.breaker else None)
    if not changes:
        current = [w for w in snapshot.workers if w.alive and w.governor is not None]
        for w in current[:GOVERNOR_ROWS]:
            g = w.governor
            assert g is not None
            table.add_row(*_texts(["now", w.worker_id, "?" if g.limit is None else str(g.limit),
                                   g.reason or "no reason reported (an older worker)"]))
        if not current:
            table.add_row(*_texts(["", "(no live governor)", "", ""]))
    return table


def receipt_line(receipt: Receipt) -> str:
    """`message 01AB… to run 01CD…: read at seq 7` (or not read yet)."""
    target = f"run {receipt.run_id}" if receipt.run_id is not None else f"job {receipt.job_id}"
    if not receipt.read:
        state = "not read yet (it is read before the run's next model turn)"
    elif receipt.read_seq is not None:
        state = f"read at seq {receipt.read_seq}"
    else:
        state = "read"
    return f"message {receipt.message_id} to {target}: {state}"


def footer(text: str, message: str, ui: UiState | None = None) -> Text:
    """The keys (or, while a message is typed, the message), the last message sent
    and its receipt, and the last key's outcome."""
    if ui is not None and ui.draft is not None:
        line = Text(f"message to {printable(ui.draft.target)}: ", style="bold")
        line.append(printable(ui.draft.text))
        line.append("_", style="blink")
        line.append(f"  {DRAFT_HELP}", style="dim")
    else:
        line = Text(text, style="dim")
    if message:
        line.append("  ")
        line.append(printable(message), style="bold yellow")
    if ui is not None and ui.receipt is not None:
        line.append("\n")
        line.append(printable(receipt_line(ui.receipt)), style="green" if ui.receipt.read else "cyan")
    return line


def job_rows_fitting(snapshot: Snapshot, height: int | None, ui: UiState | None = None) -> int | None:
    if height is None:
        return None
    approvals = bool(snapshot.approvals) or (ui is not None and ui.pane == "approvals")
    used = (FIXED_LINES + max(1, len(snapshot.by_queue)) + max(1, len(snapshot.runs))
            + max(1, len(snapshot.workers)) + GOVERNOR_ROWS
            + (len(snapshot.providers) + 3 if snapshot.providers else 0)
            + (2 if snapshot.gateway is not None else 0)
            + (max(1, len(snapshot.approvals)) + 3 if approvals else 0)
            + (1 if snapshot.budgets else 0))
    return max(3, height - used)


def render_dashboard(snapshot: Snapshot, ui: UiState | None = None, *, height: int | None = None) -> RenderableType:
    """The whole screen. `height` (terminal lines) limits the job rows shown
    (a window that follows the selection); None shows every job."""
    ui = ui or UiState()
    budgets = budgets_line(snapshot.budgets)
    gateway = gateway_line(snapshot.gateway)
    return Group(
        header(snapshot),
        *([budgets] if budgets is not None else []),
        queues_table(snapshot),
        jobs_table(snapshot, focused=ui.pane == "jobs", rows=job_rows_fitting(snapshot, height, ui)),
        runs_table(snapshot, ui),
        *approvals_table(snapshot, ui),
        workers_table(snapshot),
        *providers_table(snapshot),
        *([gateway] if gateway is not None else []),
        governor_table(snapshot),
        footer(KEYS_HELP, ui.message, ui),
    )


def render_timeline(run_id: str, lines: Sequence[str], ui: UiState, *, height: int | None = None) -> RenderableType:
    """A run's timeline (the lines of `gormes runs show`), scrolled to `ui.scroll`."""
    # the title, the footer and (once a message was sent) its receipt line
    size = len(lines) if height is None else max(1, height - 3 - (ui.receipt is not None))
    start = min(ui.scroll, max(0, len(lines) - size))
    body = Text("\n".join(map(printable, lines[start:start + size])), no_wrap=True, overflow="ellipsis")
    title = Text(f"run {printable(run_id)}  (lines {start + 1}-{min(len(lines), start + size)} of {len(lines)})",
                 style="bold")
    return Group(title, body, footer(TIMELINE_HELP, ui.message, ui))
