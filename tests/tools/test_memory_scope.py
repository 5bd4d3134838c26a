"""A pinned caller's own memory scope is `chat:<its id>`, valid whatever the id."""

from __future__ import annotations

import pytest

from gormes.events.memory import is_valid_scope
from gormes.tools.memory import own_scope


@pytest.mark.parametrize(
    ("caller_id", "scope"),
    [
        ("alice", "chat:alice"),  # an id that is a scope already keeps its scope
        ("u_42.team@example/x", "chat:u_42.team@example/x"),
        ("mcp:gormes-tests", "chat:mcp-gormes-tests"),  # an MCP client
        ("mcp:My Client ü", "chat:mcp-My-Client--"),
        (":odd", "chat:x-odd"),
        ("", "chat:x"),
    ],
)
def test_own_scope_is_always_a_valid_scope(caller_id: str, scope: str) -> None:
    assert own_scope(caller_id) == scope
    assert is_valid_scope(scope)


def test_a_long_id_is_cut_to_a_valid_scope() -> None:
    scope = own_scope("mcp:" + "n" * 500)
    assert is_valid_scope(scope) and scope.startswith("chat:mcp-nnn")
