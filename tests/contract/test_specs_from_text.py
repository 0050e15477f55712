"""Library specs take what the command line takes: text where the flags give text."""

from __future__ import annotations

import pytest


def test_the_library_specs_take_what_the_command_line_takes() -> None:
    """Fresh eyes: a capability as text and a config path as a str, as the flags give them."""
    from contexts import context
    from tuneproof.commands.preflight import PreflightSpec

    assert context(seq_len=10, batch=1, capability="9.0").capability == (9, 0)
    assert context(seq_len=10, batch=1, capability="sm_120").capability == (12, 0)
    from pathlib import Path

    assert PreflightSpec(run_file="x.yml").run_file == Path("x.yml")
    from tuneproof.core.errors import TuneproofError

    with pytest.raises(TuneproofError):
        context(seq_len=10, batch=1, capability="nine")
