"""The built-in operations: the tools agents, the CLI, gateways and cron call.

Each module holds one family of `OperationSpec`s (fs, time, jobs, control,
memory, knowledge, skills, shell, cron, and the operator's `*_admin` ones);
`builtin.default_registry()` gathers them. The kernel they run through (spec,
registry, executor) is `gormes.ops`.
"""
