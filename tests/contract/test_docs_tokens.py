"""docs/tokens.md's examples are what the commands print: build the demo data, run every
`$ tuneproof ...` line as written, and compare with the lines under it."""

from __future__ import annotations

import importlib.util
import shlex
import shutil
from pathlib import Path

import pytest

from doc_examples import dollar_examples
from tuneproof.cli.app import main

ROOT = Path(__file__).parent.parent.parent
DEMO = "/tmp/tokens-demo"  # the folder the page uses
pytestmark = pytest.mark.slow  # documentation checks: left out of mutation runs


def make_demo(folder: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_data", ROOT / "examples" / "tokens" / "make_data.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    module.make(folder)


def test_the_tokens_examples_print_what_the_page_shows(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(ROOT)
    make_demo(Path(DEMO))
    pairs = dollar_examples((ROOT / "docs" / "tokens.md").read_text())
    assert len(pairs) == 3
    capsys.readouterr()
    for command, shown in pairs:
        assert main(shlex.split(command)) == 1
        out, err = capsys.readouterr()
        assert out + err == shown, command
