"""Helpers shared by commands: config resolution, output."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

# Options every command spells the same way.
config_option = click.option(
    "--config",
    default="tiny",
    show_default=True,
    help="config.json path (or its folder); 'tiny' = the embedded Gemma-4-style model.",
)
json_option = click.option(
    "--json", "json_out", is_flag=True, help="Print one JSON object instead of tables."
)


def resolve_config(config: str) -> Any:
    """'tiny' means the embedded tiny Gemma-4-style config; anything else is a path."""
    from tuneproof.arch import from_config, tiny_config_path

    return from_config(tiny_config_path() if config == "tiny" else Path(config))


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def console() -> Any:
    from rich.console import Console

    return Console(highlight=False, width=140)


@contextmanager
def progress_bar() -> Iterator[Callable[[str], None]]:
    """A transient spinner on stderr with elapsed time, only on a terminal; yields `update(description)`.
    Off a terminal it prints nothing, so stderr holds only errors."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    ) as bar:
        task = bar.add_task("starting", total=None)
        yield lambda msg: bar.update(task, description=msg)


def int_list(text: str, flag: str) -> tuple[int, ...]:
    """A comma list of integers from a flag, or a one-line error naming the flag."""
    from tuneproof.errors import TuneproofError

    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise TuneproofError(
            f"{flag} {text!r} is not a comma list of integers", f"e.g. {flag} 512,1024,2048"
        ) from None
