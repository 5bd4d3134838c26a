"""The default registry: every built-in operation, then the users' declared ones.

The `*_admin` modules and `cron` are the operator's own (operator-only, never
offered to models): the CLI's state-changing commands call them through the
executor, so each is audited like any other operation (decision 0019).

The declared operations (`@gormes.operation`, gormes/ops/declared.py) come after
the built-ins; one that takes a built-in's name, or its wire name, is refused
with a line naming both."""

from __future__ import annotations

from gormes.ops.declared import DeclaredOperations, declared
from gormes.ops.registry import Registry, wire_name
from gormes.ops.spec import InvalidOperationSpec, OperationSpec
from gormes.tools import budgets, cron, fs, jobs, jobs_admin, knowledge, log_admin, memory_admin, runs, shell, skills, skills_admin
from gormes.tools import memory as memory_ops
from gormes.tools import approvals, log_redact, projections_admin, retention, run_admin
from gormes.tools import time as time_ops

BUILTIN_SPECS: tuple[OperationSpec, ...] = (
    *fs.SPECS, *time_ops.SPECS, *jobs.SPECS, *jobs_admin.SPECS, *shell.SPECS, *skills.SPECS,
    *skills_admin.SPECS, *memory_ops.SPECS, *memory_admin.SPECS, *runs.SPECS, *knowledge.SPECS,
    *cron.SPECS,
    *budgets.SPECS,
    *approvals.SPECS,
    *log_admin.SPECS,
    *log_redact.SPECS,
    *retention.SPECS,
    *run_admin.SPECS,
    *projections_admin.SPECS,
)


def builtin_registry() -> Registry:
    return Registry(BUILTIN_SPECS)


def default_registry(operations: DeclaredOperations | None = None) -> Registry:
    """The built-ins, then the declared operations (`operations`, default: what
    `@gormes.operation` declared)."""
    registry = builtin_registry()
    for entry in (declared if operations is None else operations).entries():
        name = entry.spec.name
        taken = registry.get(name) or registry.by_wire(wire_name(name))
        if taken is not None:
            same = "the name" if taken.name == name else f"the wire name {wire_name(name)!r}"
            raise InvalidOperationSpec(
                f"operation {name!r} ({entry.origin}) clashes with the built-in operation "
                f"{taken.name!r}: they share {same}; rename it"
            )
        registry.register(entry.spec)
    return registry
