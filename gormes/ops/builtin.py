"""The default registry: every built-in operation."""

from __future__ import annotations

from gormes.ops import control, fs, jobs, knowledge, shell, skills, time_ops
from gormes.ops import memory as memory_ops
from gormes.ops.registry import Registry


def default_registry() -> Registry:
    return Registry([*fs.SPECS, *time_ops.SPECS, *jobs.SPECS, *shell.SPECS, *skills.SPECS, *memory_ops.SPECS, *control.SPECS, *knowledge.SPECS])
