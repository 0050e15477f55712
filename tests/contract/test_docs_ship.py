"""docs/ship.md's examples are what the commands print: build the demo models, run every
`$ tuneproof ...` line of the section as written, and compare with the lines under it."""

from __future__ import annotations

import importlib.util
import shlex
import shutil
from pathlib import Path

import pytest

from doc_examples import dollar_examples
from tuneproof.cli.app import main

ROOT = Path(__file__).parent.parent.parent
DEMO = "/tmp/ship-demo"  # the folder the README uses
pytestmark = pytest.mark.slow  # documentation checks: left out of mutation runs


def _section() -> str:
    return (ROOT / "docs" / "ship.md").read_text()


def _examples() -> list[tuple[str, str]]:
    return dollar_examples(_section())


def _make(folder: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "make_models", ROOT / "examples" / "ship" / "make_models.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.make(folder)


def test_the_shipping_examples_print_what_the_readme_shows(tmp_path: Path, capsys, monkeypatch) -> None:
    # the page's own folder and width: lines wrap where the page shows them wrapped
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(ROOT)
    demo = Path(DEMO)
    shutil.rmtree(demo, ignore_errors=True)
    _make(demo)
    examples = _examples()
    assert len(examples) == 6
    capsys.readouterr()
    for command, shown in examples:
        main(shlex.split(command.replace(DEMO, str(demo))))
        out, err = capsys.readouterr()
        assert _untimed((out + err).replace(str(demo), DEMO)) == _untimed(shown), command


def _untimed(text: str) -> str:
    """The merge's `time` line (and its wrapped rest) holds this run's seconds: its words are compared,
    its numbers and its bound (on a tiny model, whichever stage the machine was slower at) are not."""
    import re

    keep, timed = [], False
    for line in text.split("\n"):
        timed = line.startswith("time ") or (timed and line.startswith(" " * 10))
        keep.append(re.sub(r"[0-9][0-9,.]*|bound by [a-z]+", "N", line) if timed else line)
    return "\n".join(keep)


def test_the_case_lines_are_in_the_readme() -> None:
    section = _section()
    assert "lora_B non-zero in 205 of 205 adapted modules, median norm 1.708" in section
    assert "experts: 0 of 11,520 tensors covered" in section
    assert "looks like directional ablation (abliteration)" in section
    assert "the base is not the one the adapter was trained on" in section


def test_the_ship_demo_maker_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    """The fresh-eyes trial re-ran the README's line: it overwrote base/ and adapter/, then failed with a
    traceback on case-adapter/. Now nothing is written into a folder that holds anything."""
    import subprocess
    import sys

    (tmp_path / "keep.txt").write_text("mine")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "ship" / "make_models.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
