"""Where an import puts a day's audit records (decision 0091): `fit` decides, pure,
from the stream's version and its records at the line's version - 1 and version."""

from __future__ import annotations

from gormes.events.audit import OperationAudited, day_stream
from gormes.events.audit_chain import GENESIS, sealed
from gormes.events.audit_copies import Fit, _candidates, fit

DAY = "audit-2026-12-08"


def record(operation: str, version: int, prev: str) -> OperationAudited:
    event = OperationAudited(operation=operation, audit_kind="log.write", caller="cli", trust="operator",
                             allowed=True, outcome="ok", duration_ms=1.0, at=1_796_700_000_000)
    return sealed(event, DAY, version, prev)


def test_a_days_first_record_follows_an_empty_stream_only_from_genesis() -> None:
    first = record("a", 1, GENESIS)
    assert fit(0, None, None, first, 1) is Fit.FOLLOWS
    forged = record("a", 1, "f" * 64)
    assert fit(0, None, None, forged, 1) is Fit.NEW  # no copy further on would take it either
    assert fit(0, None, None, record("b", 2, first.digest), 2) is Fit.NEW


def test_a_record_follows_only_the_digest_before_it() -> None:
    first = record("a", 1, GENESIS)
    second = record("b", 2, first.digest)
    assert fit(1, first, None, second, 2) is Fit.FOLLOWS
    other = record("refused import", 1, GENESIS)
    assert fit(1, other, None, second, 2) is Fit.OTHER  # this log's own chain of the day


def test_the_same_record_is_here_and_another_is_other() -> None:
    first = record("a", 1, GENESIS)
    assert fit(3, None, first, first, 1) is Fit.HERE
    assert fit(3, None, record("refused import", 1, GENESIS), first, 1) is Fit.OTHER


def test_copies_are_named_after_the_day_and_checked_as_it() -> None:
    assert day_stream(DAY + "~2") == DAY and day_stream(DAY) == DAY and day_stream("job-1~2") == "job-1~2"
    names = _candidates(DAY + "~1")
    assert [next(names) for _ in range(3)] == [DAY + "~1", DAY + "~2", DAY + "~3"]
    names = _candidates(DAY)
    assert [next(names) for _ in range(2)] == [DAY, DAY + "~1"]
