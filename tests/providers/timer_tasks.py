"""How many scripted-delay timer tasks this trio run has (tests of providers/timer.py)."""

from __future__ import annotations

import trio


def timer_tasks() -> int:
    """The timer tasks among every task of the run, system tasks included."""
    names, todo = [], [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        names.append(task.name)
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return names.count("gormes scripted-delay timer")
