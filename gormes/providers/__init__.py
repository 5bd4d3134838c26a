"""Model providers behind one neutral interface (see `base`).

`open_provider(spec)` turns a spec string into a provider:

- `scripted:PATH`: replies read from a JSON script, deterministic and offline.
  Not a model: it is for the demo and tests.
- `openai:MODEL`: any OpenAI-compatible chat-completions server.
- `anthropic:MODEL`: the Anthropic Messages API.

The two HTTP providers import their SDK only when opened (importing both costs
about 1.5 s), so `gormes --help` and the scripted provider never pay for them.
"""

from __future__ import annotations

from typing import Any

from gormes.providers.base import (
    InvalidModelReply,
    Message,
    ModelReply,
    ModelRequest,
    Provider,
    ProviderError,
    ToolCall,
    ToolSpec,
    Usage,
    parse_tool_arguments,
    request_hash,
)
from gormes.errors import UserError

__all__ = [
    "InvalidModelReply",
    "Message",
    "ModelReply",
    "ModelRequest",
    "Provider",
    "ProviderError",
    "ToolCall",
    "ToolSpec",
    "UnknownProvider",
    "Usage",
    "check_model_spec",
    "open_provider",
    "parse_tool_arguments",
    "request_hash",
]

SCHEMES = ("scripted", "openai", "anthropic")


class UnknownProvider(UserError):
    """A provider spec whose scheme gormes does not know, or that names nothing."""


def check_model_spec(spec: str) -> tuple[str, str]:
    """(scheme, the rest) of a model spec, or UnknownProvider: what can be told of it
    without opening it (a script's path is read where the run runs)."""
    scheme, sep, rest = spec.partition(":")
    if not sep or scheme not in SCHEMES:
        raise UnknownProvider(
            f"unknown model provider {spec!r}: expected one of "
            + ", ".join(f"{s}:..." for s in SCHEMES)
        )
    if not rest:
        raise UnknownProvider(f"model provider {spec!r} names no {'script' if scheme == 'scripted' else 'model'}")
    return scheme, rest


def open_provider(spec: str, **config: Any) -> Provider:
    """Open the provider a spec names: `scripted:PATH`, `openai:MODEL` or
    `anthropic:MODEL`.

    `config` goes to the provider (for `openai`: `base_url`, `api_key`, `stream`,
    `timeout`, `env`; for `anthropic` the same and `max_tokens`). A `timeout` of
    None means the default (`GORMES_MODEL_TIMEOUT`, else 120 s).
    """
    scheme, rest = check_model_spec(spec)
    # Imported on use: the scripted provider must not need an HTTP client installed.
    if scheme == "scripted":
        from gormes.providers.scripted import ScriptedProvider

        return ScriptedProvider.open(rest, **config)
    if scheme == "anthropic":
        from gormes.providers.anthropic import AnthropicProvider

        return AnthropicProvider(rest, **config)
    from gormes.providers.openai import OpenAIProvider

    return OpenAIProvider(rest, **config)
