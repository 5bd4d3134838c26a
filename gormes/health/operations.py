"""Operation checks over the registry this process would serve (the built-ins and
the operations `--import` declared): every operation has an input and output
schema, known trust classes and an audit kind, and no operator-only operation is
offered to a model.

The registry refuses such specs at registration; these checks are the second
line, for a registry assembled some other way (a plugin, a future code path).
"""

from __future__ import annotations

import msgspec

from gormes.health import Check, DoctorContext, Verdict, fail, listing, ok
from gormes.ops.declared import declared
from gormes.ops.registry import input_schema
from gormes.ops.spec import TRUST_CLASSES, InvalidOperationSpec, OperationSpec


def spec_problems(spec: OperationSpec) -> list[str]:
    problems = []
    if spec.schema is None:  # a spec with its own JSON schema (an MCP tool's) has no input Struct
        try:
            input_schema(spec.input_type)
        except InvalidOperationSpec as exc:
            problems.append(f"no input schema ({exc})")
    elif not isinstance(spec.schema, dict) or spec.schema.get("type", "object") != "object":
        problems.append("its input schema is not a JSON object schema")
    try:
        msgspec.json.schema(spec.output_type)
    except (TypeError, ValueError) as exc:
        problems.append(f"no output schema ({exc})")
    if not spec.trust:
        problems.append("no trust class")
    unknown = sorted(set(spec.trust) - set(TRUST_CLASSES))
    if unknown:
        problems.append(f"unknown trust class {', '.join(unknown)}")
    if not (spec.audit_kind or "").strip():
        problems.append("no audit kind")
    return problems


def check_specs(ctx: DoctorContext) -> Verdict:
    bad = [f"{spec.name}: {'; '.join(p)}" for spec in ctx.operations if (p := spec_problems(spec))]
    if not bad:
        users = [spec.name for spec in ctx.operations if spec.name in declared]
        of_users = f" ({len(users)} declared: {listing(users, 5)})" if users else ""
        return ok(f"{len(ctx.operations)} operations{of_users}, each with schemas, trust classes and an audit kind")
    return fail(
        listing(bad, 3),
        "fix the OperationSpec (input and output msgspec Structs, trust classes from "
        f"{', '.join(TRUST_CLASSES)}, an audit_kind) and register it through Registry.register",
    )


def check_prompt_visibility(ctx: DoctorContext) -> Verdict:
    exposed = [s.name for s in ctx.operations if s.operator_only and s.prompt_visible]
    if not exposed:
        return ok("no operator-only operation is prompt-visible")
    return fail(
        f"operator-only operation(s) offered to models as tools: {listing(exposed)}",
        "set prompt_visible=False on them (a model must never be offered what only an "
        "operator may run), or widen their trust classes deliberately",
    )


CHECKS = [
    Check(name="operations.specs", category="operations", run=check_specs, needs_database=False),
    Check(name="operations.prompt_visibility", category="operations", run=check_prompt_visibility,
          needs_database=False),
]
