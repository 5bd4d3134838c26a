"""The `--live-work` option of `import`, `append` and `migrate`: one list of what
counts as live work (gormes/tools/import_live_work.py decides it), so the three
help texts cannot drift apart."""

from __future__ import annotations

import click

LIVE_WORK = (
    "a job not ended, a cron schedule not removed, a record for a run still running or a budget still"
    " held where it lands, an approval's decision that lets a call run (a worker, the daemon or the run would act on"
    " it with the trust its records name), or a memory or skill record that vouches for itself (a"
    " fact recorded as trusted, reviewed or the operator's, a review, a forget, a skill's feedback)"
)


def live_work_option(lead: str):
    """`--live-work`, its help `lead` ("Import it even if it brings live work") then the list."""
    return click.option("--live-work", is_flag=True, help=f"{lead}: {LIVE_WORK}.")
