"""The way a value takes through `flops --config`, `memory` and `preflight` on the docs' examples
(`tests/way.py`: the functions in the order the command first calls them, by package) re-enters the
packages it left, and moves back up a layer, at least a third less often than before the run became the
spine (issue 47: `way.BEFORE`, measured on commit e321e87 with this module's definition). That no module
imports one above its layer, a private name, or in a cycle is `test_layers.py`'s."""

from __future__ import annotations

import pytest

from way import BEFORE, EXAMPLES, trace

pytestmark = pytest.mark.slow  # three whole commands, profiled


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_the_way_is_a_third_shorter_in_knots(name: str) -> None:
    found, code = trace(EXAMPLES[name])
    assert code in (0, 1)  # ran to its verdict (memory and preflight find something: exit 1)
    got = found.summary()
    for knot in ("reentries", "ups"):
        assert got[knot] <= BEFORE[name][knot] * 2 / 3, (name, knot, got, found.entered())


def test_the_way_counts_what_it_says() -> None:
    """A made-up way: cli, commands, runs, commands (a re-entry and a move up), flops, runs (a re-entry)."""
    from way import Way

    way = Way(
        steps=[
            ("cli", "cli/a.py", "f"),
            ("commands", "commands/b.py", "g"),
            ("runs", "runs/c.py", "h"),
            ("commands", "commands/b.py", "i"),
            ("flops", "flops/d.py", "j"),
            ("runs", "runs/c.py", "k"),
        ]
    )
    assert way.summary() == {"files": 4, "entries": 6, "reentries": 2, "ups": 1}
