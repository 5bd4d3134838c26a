"""Which run each attempt of an agent job drove.

Each attempt names its run in the job's log before starting it: a transcript
entry with `data={"agent_run": RUN_ID, ...}` (decision 0011). The next attempt,
the token count (`tokens.py`) and the cut-off sweep (`cut_off.py`) read it back.
"""

from __future__ import annotations

from typing import Any

from gormes.events.jobs import JobTranscribed

AGENT_RUN = "agent_run"  # the key of the transcript entry naming an attempt's run


def attempt_runs(job_records: list[Any]) -> list[str]:
    """The runs the job's attempts named in its log, oldest first."""
    runs = []
    for record in job_records:
        e = record.event
        if isinstance(e, JobTranscribed) and isinstance(e.entry.data, dict) and AGENT_RUN in e.entry.data:
            runs.append(str(e.entry.data[AGENT_RUN]))
    return runs


def last_attempt_run(job_records: list[Any]) -> str | None:
    """The run the latest attempt named in the job's log, if any."""
    runs = attempt_runs(job_records)
    return runs[-1] if runs else None
