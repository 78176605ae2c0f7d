"""``ioprobe --help`` lists the subcommands without importing them, and says what they would."""

from __future__ import annotations

from importlib import import_module

import click
import pytest

from ioprobe.cli import SUBCOMMANDS, module_help


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
@pytest.mark.parametrize("limit", [30, 45, 70, 120])
def test_the_listing_gives_each_subcommand_the_short_help_its_module_has(
    name: str, limit: int
) -> None:
    command = import_module(f"ioprobe.cli.{SUBCOMMANDS[name]}").command
    listed = click.Command(name, help=module_help(name)).get_short_help_str(limit)
    assert listed == command.get_short_help_str(limit)
    assert listed  # every subcommand says what it does
