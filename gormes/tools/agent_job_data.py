"""An `agent` job's data, checked: by the worker before its run (data it cannot run
makes the job dead at once), and at submission by every door that queues one
(`jobs submit`, the job.submit and run.submit operations), with the rules
`gormes run` applies to the same input (decision 0090).

Job data: the agent's input plus where it runs:

    {"prompt": "...", "system": "...", "model": "scripted:demo.json",
     "tools": ["fs.read"], "max_iterations": 8, "deadline_s": 60,
     "handler": "agent"}          # any registered run handler; "input" then is its input

The submission's check is stricter than the worker's and only at submission, so a
job recorded by an older gormes runs as it did: `check_job_data` (its shape) at
both; `check_submission` adds what the submitting process can tell: the handler
exists, it has the model it needs, its input is of the handler's declared type,
and each tool exists. The names are those the submitting process knows (the
built-ins and what its `--import` declares); a name under `mcp.` is an MCP
server's tool, the worker's own (`--mcp-config`), and is not checked here.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gormes.actors.runs.agent import AgentInput
from gormes.actors.runs.context import RunHandlerRegistry, run_handlers
from gormes.errors import UserError
from gormes.ops.registry import Registry
from gormes.ops.tool_names import unknown_tool
from gormes.providers import check_model_spec

AGENT_JOB = "agent"  # the job handler whose data this is
RUN_OPTIONS = ("model", "tools", "max_iterations", "deadline_s")
WORKER_TOOLS = ("mcp.",)  # tools a worker may have that a submitting process does not know


class AgentJobData(msgspec.Struct, frozen=True, kw_only=True):
    handler: str = "agent"
    input: Any = None
    model: str | None = None
    tools: list[str] | None = None
    max_iterations: int | None = None
    deadline_s: float | None = None


class InvalidAgentJobData(UserError):
    """Data the `agent` job cannot run: retrying it would fail the same way."""


def check_job_data(data: Any) -> tuple[AgentJobData, Any]:
    """(run options, the handler's input), or InvalidAgentJobData saying what is
    wrong. For "agent" without "input", the data itself (minus the run options) is
    the agent's input, checked against `AgentInput` here (an unknown field, no
    prompt), before any run is recorded; another handler checks its own input."""
    if not isinstance(data, dict):
        raise InvalidAgentJobData(f"agent job data must be a JSON object, got {type(data).__name__}")
    try:
        options = msgspec.convert(
            {k: v for k, v in data.items() if k in ("handler", "input", *RUN_OPTIONS)}, AgentJobData
        )
    except msgspec.ValidationError as exc:
        raise InvalidAgentJobData(f"agent job data: {exc}") from None
    if "input" in data:
        run_input = options.input
    else:
        run_input = {k: v for k, v in data.items() if k not in ("handler", "deadline_s")}
    if options.handler == "agent":
        try:
            msgspec.convert(run_input, AgentInput)
        except msgspec.ValidationError as exc:
            raise InvalidAgentJobData(f"agent job data: {exc}") from None
    return options, run_input


def check_submission(data: Any, operations: Registry, handlers: RunHandlerRegistry = run_handlers) -> None:
    """`check_job_data`, then what `gormes run` refuses too: an unknown handler, no
    model for one that needs it, a model spec no provider reads, input its handler's
    declared type refuses, a tool no operation of `operations` is."""
    options, run_input = check_job_data(data)
    try:
        handlers.get(options.handler)
        if options.model is None and handlers.needs_model(options.handler):
            raise UserError(f"run handler {options.handler!r} needs a model: give \"model\" "
                            "(scripted:PATH, openai:MODEL or anthropic:MODEL)")
        if options.model is not None:
            check_model_spec(options.model)
        handlers.check_input(options.handler, run_input)
    except UserError as exc:
        raise InvalidAgentJobData(f"agent job data: {exc}") from None
    found = unknown_tool(options.tools, (spec.name for spec in operations.list()), unchecked_prefixes=WORKER_TOOLS)
    if found is not None:
        raise InvalidAgentJobData(f"agent job data: tools: {found}")
