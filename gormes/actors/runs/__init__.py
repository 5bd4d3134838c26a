"""The run actor: a handler driven on its own stream `run-<id>`.

`context` is `RunContext`, the only door a run handler has to the world; `live`
is the context that reaches it and records each observation, `replay_context`
the one that serves a recording back; `manager` starts, supervises and ends
runs; `agent` is the built-in agent loop; `replay`, `replay_report` and
`recorded` are exact replay and the recordings it reads; `continuation` and
`resume` are fork and resume, `child_resumption` which child a resumed spawn
takes over; `timeline`, `listing` and `process` are what the CLI reads.
"""
