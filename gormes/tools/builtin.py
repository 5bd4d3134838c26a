"""The default registry: every built-in operation.

The `*_admin` modules and `cron` are the operator's own (operator-only, never
offered to models): the CLI's state-changing commands call them through the
executor, so each is audited like any other operation (decision 0019)."""

from __future__ import annotations

from gormes.tools import cron, fs, jobs, jobs_admin, knowledge, log_admin, memory_admin, runs, shell, skills, skills_admin
from gormes.tools import memory as memory_ops
from gormes.tools import projections_admin, run_admin
from gormes.tools import time as time_ops
from gormes.ops.registry import Registry


def default_registry() -> Registry:
    return Registry([
        *fs.SPECS, *time_ops.SPECS, *jobs.SPECS, *jobs_admin.SPECS, *shell.SPECS, *skills.SPECS,
        *skills_admin.SPECS, *memory_ops.SPECS, *memory_admin.SPECS, *runs.SPECS, *knowledge.SPECS,
        *cron.SPECS,
        *log_admin.SPECS,
        *run_admin.SPECS,
        *projections_admin.SPECS,
    ])
