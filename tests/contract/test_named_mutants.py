"""The named mutants `make mutate` applies (`dev/named_mutants.py`) still find the code they mutate: a
pattern that matches nothing would stop `make mutate` before it judges anything (two had drifted when
the records became keyword-only, issue 47)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "dev"))

import named_mutants  # noqa: E402


@pytest.mark.parametrize("mutant", named_mutants.MUTANTS, ids=[m[0] for m in named_mutants.MUTANTS])
def test_each_named_mutant_applies_once(mutant: tuple) -> None:
    name, rel, steps, _ = mutant
    text = (ROOT / rel).read_text()
    assert named_mutants.mutate(text, steps, name) != text
