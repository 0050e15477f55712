"""Helpers shared by commands: config resolution, output."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


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
