"""Operations: typed, trust-checked, audited things that agents, the CLI, gateways
and cron may do. See spec.py (what an operation is), registry.py (the one
registry and the model tool schemas), executor.py (the one door that runs
them) and declared.py (`@gormes.operation`: users' operations). This is the
kernel only; the built-in operations are `gormes.tools`."""

from gormes.ops.executor import Executor
from gormes.ops.registry import Registry
from gormes.ops.spec import (
    TRUST_CLASSES, ApprovalDenied, Caller, InvalidOperationInput, InvalidOperationSpec, OperationContext,
    OperationDenied, OperationSpec, OperationTimeout, OperationUnavailable,
    PathOutsideWorkspace, ToolSchema, UnknownOperation,
)

__all__ = [
    "TRUST_CLASSES", "ApprovalDenied", "Caller", "Executor", "InvalidOperationInput", "InvalidOperationSpec",
    "OperationContext", "OperationDenied", "OperationSpec", "OperationTimeout",
    "OperationUnavailable", "PathOutsideWorkspace", "Registry", "ToolSchema", "UnknownOperation",
]
