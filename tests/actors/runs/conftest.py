"""Fixtures for run tests (in run_fixtures.py, shared with tests/actors/agent_jobs):
a real store, a workspace with files, the real ops executor over it, and
`script(...)`, which writes a `scripted:` model script."""

from run_fixtures import executor, script, workspace  # noqa: F401 (fixtures)
