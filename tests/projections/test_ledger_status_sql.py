"""`ledger.status_in`: the status sets of the job state machine as SQL over `jobs`."""

from __future__ import annotations

import pytest

from gormes.events.job_machine import CLAIMABLE, LIVE, PROMOTABLE
from gormes.projections import ledger


def test_a_single_status_is_written_as_its_partial_index_writes_it() -> None:
    # The claim and the promotion sweep test one status each; written as the
    # partial index's WHERE, the planner can use jobs_waiting and jobs_delayed.
    wheres = {index.name: index.where for index in ledger.INDEXES if index.where}
    assert ledger.status_in(CLAIMABLE) == wheres["jobs_waiting"]
    assert ledger.status_in(PROMOTABLE) == wheres["jobs_delayed"]


def test_several_statuses_are_one_sorted_sql_text() -> None:
    assert ledger.status_in(["dead", "active"]) == "status IN ('active', 'dead')"
    assert ledger.status_in({"active", "dead"}, negate=True) == "status NOT IN ('active', 'dead')"
    assert ledger.status_in({"paused"}, negate=True) == "status != 'paused'"
    assert ledger.status_in(LIVE) == (
        "status IN ('active', 'delayed', 'paused', 'waiting', 'waiting-children')"
    )


@pytest.mark.parametrize("statuses", [set(), {"waiting", "x' OR 1=1 --"}, {"running"}])
def test_what_is_not_a_set_of_job_statuses_is_refused(statuses: set[str]) -> None:
    with pytest.raises(ValueError, match="not a set of job statuses"):
        ledger.status_in(statuses)
