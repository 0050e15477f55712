"""The shape of the code (docs/contributing.md): thin commands, short functions, modules of one concept.

Every command is flags -> spec -> prepare -> run -> `finish(result, json_out)`; what a command prints
is its Result's `render` or `to_dict()`, so the command line and the library tell one story
(tests/test_json_*.py show `to_dict()` equals `--json` for every command).
"""

from __future__ import annotations

import ast
from pathlib import Path

import click

from tuneproof.cli.app import app

SRC = Path(__file__).resolve().parent.parent.parent / "src" / "tuneproof"
MAX_FUNCTION_LINES = 80
MAX_CLI_SHARE = 0.08


def _modules() -> dict[Path, str]:
    return {p: p.read_text() for p in sorted(SRC.rglob("*.py"))}


def test_the_command_line_is_a_thin_layer() -> None:
    lines = {p: len(text.splitlines()) for p, text in _modules().items()}
    cli = sum(n for p, n in lines.items() if "cli" in p.relative_to(SRC).parts)
    assert cli / sum(lines.values()) < MAX_CLI_SHARE, f"cli/ is {cli / sum(lines.values()):.1%} of the code"


def test_no_function_is_longer_than_a_screen() -> None:
    long = []
    for p, text in _modules().items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{p.relative_to(SRC)}:{node.name} ({n} lines)")
    assert long == []


def _commands(group: click.Group, prefix: str = "") -> list[str]:
    names = []
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            names += _commands(cmd, f"{prefix}{name} ")
        else:
            names.append(f"{prefix}{name}")
    return names


def test_every_command_has_a_library_versus_json_test() -> None:
    """Each command's name appears in a tests/test_json_*.py as the first word(s) of a `main([...])`
    call with --json, next to the library call whose to_dict() it must equal."""
    text = "\n".join(
        p.read_text() for p in sorted(SRC.parent.parent.joinpath("tests").rglob("test_json_*.py"))
    )
    missing = []
    for name in _commands(app):
        first = ", ".join(f'"{w}"' for w in name.split())
        if f"[{first}," not in text and f"[{first}]" not in text:
            missing.append(name)
    assert missing == []
