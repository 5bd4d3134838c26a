from __future__ import annotations

import pytest

from gormes.providers import Usage
from gormes.providers.pricing import (
    Price,
    PricingError,
    PricingTable,
    cost,
    format_cost,
    load_table,
    shipped_table,
)
from gormes.errors import UserError

TABLE = PricingTable(
    {
        "gpt-4o*": Price(input=2.5, output=10.0, cache_read=1.25),
        "gpt-4o-mini*": Price(input=0.15, output=0.6),
        "gpt-4o-mini-special": Price(input=1.0, output=1.0),
    }
)


def test_the_most_specific_entry_wins_whatever_the_order():
    assert TABLE.price("gpt-4o-2024-08-06").input == 2.5
    assert TABLE.price("gpt-4o-mini-2024-07-18").input == 0.15
    assert TABLE.price("gpt-4o-mini-special").input == 1.0
    assert TABLE.price("openai/gpt-4o-mini").input == 0.15  # a vendor/ prefix is looked through


def test_cost_prices_cached_input_apart():
    usage = Usage(input=1_000_000, output=100_000, cache_read=400_000)
    assert TABLE.cost("gpt-4o", usage) == pytest.approx(0.6 * 2.5 + 0.4 * 1.25 + 0.1 * 10.0)
    # No cache price: cached tokens cost the input price.
    assert TABLE.cost("gpt-4o-mini", usage) == pytest.approx(1.0 * 0.15 + 0.1 * 0.6)


def test_cache_writes_are_priced_apart_where_the_table_says():
    # Anthropic's usage: 1M prompt tokens, of which 0.5M read from the cache and 0.2M written into it
    usage = Usage(input=1_000_000, output=0, cache_read=500_000, cache_write=200_000)
    table = shipped_table()
    assert table.cost("claude-sonnet-4-5", usage) == pytest.approx(0.3 * 3.0 + 0.5 * 0.30 + 0.2 * 3.75)
    # No cache write price: written tokens cost the input price.
    assert TABLE.cost("gpt-4o", usage) == pytest.approx(0.5 * 2.5 + 0.5 * 1.25)
    assert table.total([("claude-sonnet-4-5", usage), ("claude-sonnet-4-5", usage)]) == pytest.approx(
        2 * table.cost("claude-sonnet-4-5", usage)
    )


def test_an_unknown_model_has_an_unknown_price_not_zero():
    assert TABLE.cost("llama-3-70b", Usage(input=10, output=10)) is None
    assert format_cost(None) == "unknown price"
    assert format_cost(0.0) == "$0"
    assert format_cost(0.01234) == "$0.0123"
    assert format_cost(0.0000123) == "$0.000012"
    assert format_cost(9.4e-05) == "$0.000094"
    assert format_cost(3.25e-09) == "$0.0000000033"
    assert "e" not in format_cost(1e-15)


def test_the_shipped_table_loads_and_prices_known_models():
    table = shipped_table()
    assert table.cost("scripted", Usage(input=1000, output=1000)) == 0.0
    assert table.cost("gpt-4o-mini-2024-07-18", Usage(input=1_000_000, output=0)) == pytest.approx(0.15)
    assert table.cost("claude-opus-4-5-20251101", Usage(input=0, output=1_000_000)) == pytest.approx(25.0)
    assert table.cost("no-such-model", Usage(input=1, output=1)) is None
    assert cost("gpt-4o", Usage(input=0, output=1_000_000), table) == pytest.approx(10.0)


def test_gormes_pricing_extends_and_overrides_the_shipped_table(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text('[models."gpt-4o*"]\ninput = 1.0\noutput = 2.0\n\n[models."my-local-llm"]\ninput = 0\noutput = 0\n')
    table = load_table(env={"GORMES_PRICING": str(path)})
    assert table.price("gpt-4o-2024-08-06") == Price(input=1.0, output=2.0)
    assert table.cost("my-local-llm", Usage(input=5, output=5)) == 0.0
    assert table.price("gpt-4o-mini").input == 0.15
    assert load_table(env={}) is shipped_table()
    assert load_table(env={"GORMES_PRICING": ""}) is shipped_table()


def test_a_path_given_wins_over_gormes_pricing(tmp_path):
    given, env = tmp_path / "given.toml", tmp_path / "env.toml"
    given.write_text('[models."m"]\ninput = 1\noutput = 1\n')
    env.write_text('[models."m"]\ninput = 9\noutput = 9\n')
    assert load_table(given, env={"GORMES_PRICING": str(env)}).price("m") == Price(input=1, output=1)
    with pytest.raises(PricingError, match="no such file"):  # the path is read, not the env's file
        load_table(tmp_path / "missing.toml", env={"GORMES_PRICING": str(env)})


def test_total_sums_per_model_so_any_order_gives_the_same_float():
    turns = [("gpt-4o", Usage(input=1234, output=56)), ("gpt-4o-mini", Usage(input=7, output=8)),
             ("gpt-4o", Usage(input=91, output=11, cache_read=50))]
    total = TABLE.total(turns)
    assert total == TABLE.total(list(reversed(turns)))
    assert total == pytest.approx(sum(TABLE.cost(m, u) for m, u in turns))
    assert TABLE.total([]) == 0.0
    assert TABLE.total([*turns, ("llama-3-70b", Usage(input=1, output=1))]) is None


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "no such file"),
        ("[models", "not valid TOML"),
        ('[models."x"]\ninput = 1\n', "missing required field `output`"),
        ('[models."x"]\ninput = -1\noutput = 1\n', "Expected `float` >= 0"),
        ('[model."x"]\ninput = 1\noutput = 1\n', "unknown field `model`"),
        ('input = 3.0\noutput = 15.0\n', "unknown field `input`"),  # a flat table
        ('{"input": 3.0, "output": 15.0, "cache_read": 0.3}', "this is JSON; the format is TOML"),
        (b"\xff\xfe[models]", "not UTF-8"),
    ],
)
def test_a_bad_pricing_table_is_one_clear_line(tmp_path, content, problem):
    path = tmp_path / "prices.toml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(PricingError) as caught:
        PricingTable.load(path)
    message = str(caught.value)
    assert isinstance(caught.value, UserError) and "\n" not in message
    assert message.startswith(f"pricing table {path}: ") and problem in message
    if content is not None:  # what is wrong with it, and what the format is
        assert '[models."NAME"] tables with input, output' in message
