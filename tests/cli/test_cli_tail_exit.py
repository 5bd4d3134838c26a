"""How `gormes tail --follow` sorts out what trio.run raised."""

from __future__ import annotations

from gormes.cli.tail import _first_real_error
from gormes.errors import StoreError


def test_an_interrupt_alone_is_a_clean_exit() -> None:
    assert _first_real_error(KeyboardInterrupt()) is None
    grouped = BaseExceptionGroup("g", [KeyboardInterrupt(), BaseExceptionGroup("h", [KeyboardInterrupt()])])
    assert _first_real_error(grouped) is None


def test_a_gormes_error_is_taken_out_of_its_groups() -> None:
    error = StoreError("no gormes database at x")
    grouped = BaseExceptionGroup("g", [KeyboardInterrupt(), ExceptionGroup("h", [error])])
    assert _first_real_error(grouped) is error
    assert _first_real_error(error) is error
