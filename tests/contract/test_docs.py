"""The README and docs/ as a newcomer reads them: short enough, every link and command real, nothing
pointing outside the repository. (The pages' output blocks are checked against the commands in
test_docs_gate.py, test_docs_ship.py and test_train.py.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from tuneproof.cli.app import app, main

ROOT = Path(__file__).resolve().parent.parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def command_lines(text: str) -> list[str]:
    """Every `tuneproof ...` (or `$ tuneproof ...`) line inside a code block, continuations joined."""
    lines: list[str] = []
    for block in text.split("```")[1::2]:
        pending = ""
        for raw in block.split("\n"):
            line = raw.strip()
            if line.startswith("$ "):
                line = line[2:]
            if pending:
                line, pending = pending + " " + line, ""
            if not line.startswith("tuneproof "):
                continue
            if line.endswith("\\"):
                pending = line[:-1].rstrip()
                continue
            line = line.split("  #")[0].strip()
            if not line.split()[1].endswith(","):  # a bench's output line ("tuneproof index, ...")
                lines.append(line)
    return lines


def is_synopsis(line: str) -> bool:
    """`tuneproof flops --config PATH --seq-len T [--attn eager|sdpa]`: a usage line, not a run."""
    return "[" in line or bool(re.search(r"\s[A-Z][A-Z_/.]*(\s|$)", line))


def test_the_readme_is_short_and_links_only_to_pages_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 300
    links = re.findall(r"\]\(([^)#]+)\)", readme)
    assert links and all((ROOT / link).exists() for link in links), links
    assert "pip install tuneproof" in readme and "make demo" in readme and "make test" in readme
    assert "the reference run" in readme.lower() and "CASE" not in readme


def test_nothing_points_outside_the_repository() -> None:
    offenders = []
    for folder in ("src", "tests", "docs", "bench", "examples", "dev"):
        for p in (ROOT / folder).rglob("*"):
            if p.suffix in (".py", ".md", ".toml", ".txt") and "data" not in p.relative_to(ROOT).parts[1:2]:
                text = p.read_text(errors="replace")
                if "../" + "shared" in text or "CASE" + ".md" in text:  # (this line names neither)
                    offenders.append(str(p.relative_to(ROOT)))
    assert offenders == []


def _resolve(words: list[str]) -> tuple[click.Command, list[str], str]:
    cmd: click.Command = app
    name = "tuneproof"
    while isinstance(cmd, click.Group) and words and words[0] in cmd.commands:
        name, cmd, words = words[0], cmd.commands[words[0]], words[1:]
    return cmd, words, name


COMMANDS = [(page.name, line) for page in PAGES for line in command_lines(page.read_text())]


def test_the_pages_show_commands() -> None:
    pages = {page for page, _ in COMMANDS}
    assert {"README.md", "flops.md", "measure.md", "ship.md", "gate.md", "train.md"} <= pages


@pytest.mark.parametrize(("page", "line"), COMMANDS, ids=[f"{p}:{line[10:40]}" for p, line in COMMANDS])
def test_every_command_in_the_docs_parses(page: str, line: str) -> None:
    """Each command a page shows names a real command and real options with values they accept."""
    words = shlex.split(line)[1:]
    cmd, args, name = _resolve(words)
    assert cmd is not app or words[0].startswith("-"), f"{page}: {line!r} names no command"
    if is_synopsis(line):  # every option it names exists
        known = {opt for param in cmd.params for opt in param.opts}
        named = set(re.findall(r"--[a-z][a-z0-9-]*", line))
        assert named <= known, f"{page}: {line!r} names unknown options {sorted(named - known)}"
        return
    try:
        cmd.make_context(name, args)
    except click.exceptions.Exit:
        pass  # --help, --version
    except click.UsageError as e:
        pytest.fail(f"{page}: {line!r}: {e.format_message()}")


def test_fits_shipped_points_print_what_the_measure_page_quotes(capsys) -> None:
    page = " ".join((ROOT / "docs" / "measure.md").read_text().split())
    assert "give 20.8 % at 2,048 and 67.7 % at 16,384" in page
    assert main(["fit", "--points", str(ROOT / "tests" / "data" / "points_case.csv")]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert "20.8" in rows["2048"][4] and "67.7" in rows["16384"][4]


def test_the_readme_python_example_runs(monkeypatch, capsys) -> None:
    monkeypatch.chdir(ROOT)
    readme = (ROOT / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md", "exec"), {})
    performed = float(capsys.readouterr().out.split()[0])
    assert 0.05 < performed < 0.2  # the datasheet's peak (503.8), not the 315 the trainer assumed


def test_no_page_but_the_generated_table_counts_the_families() -> None:
    """docs/flops.md once said families.md "lists the 121 costed families", stale as types were added:
    only families.md (regenerated by tests/family_parity.py --markdown) may carry the count."""
    stale = re.compile(r"\b\d+ (costed )?(model )?families\b")
    for page in PAGES:
        if page.name != "families.md":
            assert not stale.search(page.read_text()), page.name
