"""The cap on the runs of one tree: a root run and all its subagents (decision 0063).

`max_children` bounds the spawns of each run, so a tree could still hold
1 + 100 + 100^2 + 100^3 runs. `max_tree_runs` bounds the whole tree. The count is
shared by the tree's runs (one `TreeCount`, handed down from the root to each
subagent), so it lives where they live: in one RunManager, in one process.

A refusal depends on what the tree's other runs did first, which a run's own
stream cannot tell again: it is recorded on the refusing run's stream
(`run.spawn_refused`), and replay serves it instead of counting.
"""

from __future__ import annotations

from dataclasses import dataclass

# Two full levels of the per-run default (max_children 100): an orchestrating run,
# 100 coordinators and 100 workers under each, 10,000 subagents at work; the third
# level's million runs is refused (decision 0063).
DEFAULT_MAX_TREE_RUNS = 1 + 100 + 100 * 100
MAX_TREE_RUNS_ENV = "GORMES_MAX_TREE_RUNS"


def tree_cap_refusal(root_run_id: str, runs: int, cap: int | None) -> str | None:
    """Why one more run in the tree is refused by its cap, or None. `runs` counts
    the root and every subagent the tree holds already."""
    if cap is None or runs < cap:
        return None
    return f"tree cap reached: the tree of run {root_run_id} holds {runs} runs, its cap (max_tree_runs {cap})"


@dataclass(eq=False, slots=True)
class TreeCount:
    """The runs one tree holds, shared by its runs. `cap` None: a tree with no cap
    (a run recorded before the cap existed: only replay meets one, and replay does
    not count)."""

    root_run_id: str
    cap: int | None
    runs: int = 1  # the root

    def take(self) -> str | None:
        """Take a place for one more run; the refusal, taking nothing, if the cap is
        reached. No await between the check and the count: spawns made at once by
        the tree's runs keep to the cap."""
        refused = tree_cap_refusal(self.root_run_id, self.runs, self.cap)
        if refused is None:
            self.runs += 1
        return refused

    def give_back(self) -> None:
        """A place taken for a spawn that was not recorded: not made."""
        self.runs -= 1

    def add_history(self, runs: int) -> None:
        """Runs the tree holds from history: the subagents, and theirs, that a
        continued run's copied prefix spawned (tree_history.py). They may put the
        count past the cap; later spawns are then refused."""
        self.runs += runs
