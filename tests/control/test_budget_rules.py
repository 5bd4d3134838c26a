"""The budget's pure decisions: what counts against a cap, refusals, settling, expiry."""

from __future__ import annotations

import pytest

from gormes.control.budget_rules import Ask, BudgetState, fold, raised_cap, refusal, reserve, worst_case
from gormes.events.budgets import BudgetExhausted, BudgetReleased, BudgetReserved, BudgetSet, BudgetSettled
from gormes.events.jobs import Tokens
from gormes.providers.base import Message, ModelRequest
from gormes.providers.pricing import Price, PricingTable

TABLE = PricingTable({"m": Price(input=1.0, output=2.0, cache_write=4.0)})


def budget(**caps) -> BudgetState:
    return fold("b", [BudgetSet(budget_id="b", at=0, **caps)])


def ask(tokens: Tokens, hold: str = "h1", now: int = 1000, model: str = "m") -> Ask:
    return Ask(hold_id=hold, run_id="r", job_id=None, model=model, tokens=tokens, now=now)


def test_a_turn_that_fits_is_held_and_one_that_would_pass_the_cap_is_refused() -> None:
    state = budget(tokens=100)
    held = reserve(state, ask(Tokens(input=40, output=20)), TABLE)
    assert isinstance(held, BudgetReserved) and held.tokens.input == 40
    state = fold("b", [held], state)
    refused = reserve(state, ask(Tokens(input=30, output=20), hold="h2"), TABLE)
    assert isinstance(refused, BudgetExhausted)
    assert refused.reason == ("budget b: this turn's worst case (50 tokens) would pass its cap of 100 tokens "
                              "(0 spent, 60 held by turns in flight)")
    assert refused.policy == "stop"
    exactly = reserve(state, ask(Tokens(input=20, output=20), hold="h2"), TABLE)
    assert isinstance(exactly, BudgetReserved)  # 60 + 40 = 100: at the cap, not past it


def test_settling_replaces_the_hold_with_what_was_used_and_a_release_frees_it() -> None:
    state = budget(tokens=100)
    state = fold("b", [reserve(state, ask(Tokens(input=50, output=50)), TABLE)], state)
    assert refusal(state, ask(Tokens(input=1), hold="x"), TABLE) is not None
    state = fold("b", [BudgetSettled(hold_id="h1", used=Tokens(input=30, output=10), at=2)], state)
    assert state.spent == {"m": Tokens(input=30, output=10)} and state.holds == {} and state.turns == 1
    assert refusal(state, ask(Tokens(input=60), hold="x"), TABLE) is None
    assert refusal(state, ask(Tokens(input=61), hold="x"), TABLE) is not None
    state = fold("b", [reserve(state, ask(Tokens(input=60), hold="h2"), TABLE),
                       BudgetReleased(hold_id="h2", at=3)], state)
    assert state.holds == {} and refusal(state, ask(Tokens(input=60), hold="x"), TABLE) is None


def test_a_hold_never_settled_stops_counting_after_hold_s() -> None:
    state = budget(tokens=100, hold_s=10)
    state = fold("b", [reserve(state, ask(Tokens(input=100), now=1000), TABLE)], state)
    assert refusal(state, ask(Tokens(input=1), hold="x", now=10_999), TABLE) is not None
    assert refusal(state, ask(Tokens(input=1), hold="x", now=11_000), TABLE) is None


def test_cost_caps_price_a_worst_case_at_the_dearer_of_input_and_cache_writes() -> None:
    state = budget(cost=0.001)  # $1 per 1M input, $4 per 1M cache writes, $2 per 1M output
    # 100 input as cache writes: $0.0004, 100 output: $0.0002 -> $0.0006 held
    state = fold("b", [reserve(state, ask(Tokens(input=100, output=100)), TABLE)], state)
    assert state.holds
    refused = reserve(state, ask(Tokens(input=100, output=100), hold="h2"), TABLE)
    assert isinstance(refused, BudgetExhausted) and "$0.000600 held" in refused.reason
    # settled at plain input prices, it costs $0.0003: room for one more worst case
    state = fold("b", [BudgetSettled(hold_id="h1", used=Tokens(input=100, output=100), at=2)], state)
    assert isinstance(reserve(state, ask(Tokens(input=100, output=100), hold="h2"), TABLE), BudgetReserved)


def test_a_cost_cap_refuses_a_model_with_no_price() -> None:
    refused = reserve(budget(cost=5.0), ask(Tokens(input=1), model="unpriced"), TABLE)
    assert isinstance(refused, BudgetExhausted)
    assert refused.reason.startswith("budget b caps cost, and unpriced has no price in pricing table ")
    assert isinstance(reserve(budget(tokens=5), ask(Tokens(input=1), model="unpriced"), TABLE), BudgetReserved)


def test_the_worst_case_is_the_requests_bytes_and_its_max_tokens_or_the_estimate() -> None:
    request = ModelRequest(model="m", messages=(Message(role="user", content="x" * 400),), max_tokens=50)
    state = budget(tokens=10_000)
    tokens = worst_case(state, request)
    assert tokens.output == 50 and tokens.input > 400  # every byte a token: a bound
    assert worst_case(budget(tokens=1, bytes_per_token=4.0), request).input == -(-tokens.input // 4)
    no_max = ModelRequest(model="m", messages=request.messages)
    assert worst_case(budget(tokens=1, output_estimate=777), no_max).output == 777


def test_a_pause_refusal_that_paused_the_job_is_remembered_until_a_raise() -> None:
    from gormes.events.budgets import BudgetRaised

    state = budget(tokens=10, policy="pause")
    refused = reserve(state, ask(Tokens(input=11)), TABLE)
    assert isinstance(refused, BudgetExhausted) and refused.policy == "pause"
    state = fold("b", [_paused(refused, "j1")], state)
    assert state.paused_jobs == ("j1",) and state.refused == 1
    state = fold("b", [BudgetRaised(tokens=20, resumed_jobs=("j1",), at=5)], state)
    assert state.paused_jobs == () and state.tokens == 20


def _paused(event: BudgetExhausted, job_id: str) -> BudgetExhausted:
    import msgspec

    return msgspec.structs.replace(event, job_id=job_id, job_paused=True)


def test_raise_only_raises() -> None:
    assert raised_cap(100, 50, None) == 150
    assert raised_cap(100, None, 400) == 400
    assert raised_cap(None, 5, None) is None
    with pytest.raises(ValueError, match="below the current cap of 100"):
        raised_cap(100, None, 40)
