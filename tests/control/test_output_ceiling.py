"""The output ceiling's pure rules (gormes/control/output_ceiling.py)."""

from __future__ import annotations

from gormes.control.output_ceiling import held_to, output_ceiling, sent_max_tokens
from gormes.events.jobs import Tokens
from gormes.providers.base import Message, ModelRequest

ASK = ModelRequest(model="m", messages=(Message(role="user", content="hi"),))


def test_the_ceiling_is_the_smallest_output_held() -> None:
    assert output_ceiling([Tokens(input=9, output=4096), Tokens(input=9, output=300)]) == 300


def test_a_budget_that_held_no_output_still_sends_a_ceiling_an_api_takes() -> None:
    # an output estimate of 0, stored before `budget set` refused it
    assert output_ceiling([Tokens(input=9, output=0), Tokens(input=9, output=300)]) == 1


def test_a_request_with_no_bound_is_sent_with_the_ceiling_and_the_handlers_is_left_alone() -> None:
    sent = held_to(ASK, 300)
    assert sent.max_tokens == 300 and ASK.max_tokens is None
    assert sent_max_tokens(ASK, sent) == 300


def test_a_request_already_bounded_within_the_ceiling_goes_as_it_is() -> None:
    own = ModelRequest(model="m", messages=ASK.messages, max_tokens=200)
    for request, default in ((own, None), (ASK, 200)):  # its own bound, or the provider's (Anthropic's)
        sent = held_to(request, 300, default)
        assert sent is request and sent_max_tokens(request, sent) is None


def test_a_providers_default_above_the_ceiling_is_replaced_by_it() -> None:
    assert held_to(ASK, 300, 4096).max_tokens == 300


def test_a_turn_charged_to_no_budget_goes_as_it_is() -> None:
    assert held_to(ASK, None, 4096) is ASK
