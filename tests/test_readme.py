"""The README's command reference names every command the CLI has."""

from __future__ import annotations

import re
from pathlib import Path

import click

from gormes.cli.main import COMMANDS, cli

README = (Path(__file__).parent.parent / "README.md").read_text()


def command_paths() -> list[str]:
    ctx = click.Context(cli, info_name="gormes")
    paths = []
    for name in sorted(COMMANDS):
        command = cli.get_command(ctx, name)
        if isinstance(command, click.Group):
            paths += [f"{name} {sub}" for sub in command.list_commands(ctx)]
        else:
            paths.append(name)
    return paths


def test_every_command_is_in_the_readme_reference():
    # "gormes jobs cancel|pause|resume|retry ID" names four subcommands at once
    mentioned = set()
    for match in re.finditer(r"gormes ((?:[a-z-]+)(?: [a-z|-]+)?)", README):
        words = match.group(1).split(" ")
        for alternative in (words[1].split("|") if len(words) > 1 else [""]):
            mentioned.add(f"{words[0]} {alternative}".strip())
    missing = [path for path in command_paths() if path not in mentioned]
    assert missing == []
