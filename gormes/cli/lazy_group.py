"""A click group some of whose commands are defined in another module, imported
the first time one of them is asked for.

The commands that are one operation derive their options from its input type
(gormes/cli/derive.py), which loads the executor and with it trio; the quick
reads of the same group (`jobs list`, `jobs get`, `runs list` on a current file)
do without both. So `jobs` names `submit`, `cancel`, ... as defined by
gormes/cli/job_operations.py, which registers them on the group when imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click


class LazyCommands(click.Group):
    """A group whose commands named in `later` (name -> module) are added to it by
    that module when imported, which happens when one of them is first asked for."""

    def __init__(self, *args: Any, later: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.later = dict(later or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.later})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in self.later:
            importlib.import_module(self.later[name])
            if name not in self.commands:
                raise LookupError(f"{self.later[name]} defines no command {name!r} of `{self.name}`")
        return super().get_command(ctx, name)
