"""A budgeted turn's output ceiling: the most output its reservations held, and
the request that carries it to the provider (decision 0065). Pure.

Each budget a turn is charged to reserved the request's `max_tokens`, else its
own `output_estimate`, as the turn's output. A provider sent no more than the
smallest of those as `max_tokens` cannot make the turn use more output than any
of its budgets held for it. The handler's request is left as it is: it is what
the run records and replay hashes; only the copy sent to the provider carries
the ceiling.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from gormes.events.jobs import Tokens
from gormes.providers.base import ModelRequest


def output_ceiling(held: Iterable[Tokens]) -> int:
    """The smallest output the turn's reservations held (one per budget), and at
    least 1: a budget set with an output estimate of 0 before `budget set` refused
    it holds nothing, and every API refuses `max_tokens` 0; its turns are held to
    one token, the overrun counted as any is."""
    return max(1, min(tokens.output for tokens in held))


def held_to(request: ModelRequest, ceiling: int | None, provider_default: int | None = None) -> ModelRequest:
    """The request the provider is sent: `request` itself when what it would be
    sent already bounds the output within `ceiling` (its `max_tokens`, else the
    provider's own default: Anthropic's, which its API requires), else a copy
    whose `max_tokens` is the ceiling. `ceiling` None: the turn is charged to no
    budget, and the request goes as it is."""
    if ceiling is None:
        return request
    bound = request.max_tokens if request.max_tokens is not None else provider_default
    if bound is not None and bound <= ceiling:
        return request
    return msgspec.structs.replace(request, max_tokens=ceiling)


def sent_max_tokens(request: ModelRequest, sent: ModelRequest) -> int | None:
    """What a turn records of its ceiling: the `max_tokens` sent in place of the
    handler's, or None when the handler's request went as it was."""
    return None if sent is request else sent.max_tokens
