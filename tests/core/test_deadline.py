"""`core.deadline`: a budget that work asks before starting, and that counts from the process's start
when the command line asks (a user's stopwatch includes the imports)."""

from __future__ import annotations

from tuneproof.core.deadline import Deadline


def test_fits_status_and_the_cut_line() -> None:
    now = [0.0]
    d = Deadline(budget_s=10.0, clock=lambda: now[0], unit="batch")
    assert d.fits(10.0) and not d.fits(10.5) and d.status() == ""
    now[0] = 12.0
    assert d.status() == " (2 s past the 10 s budget; finishing the batch under way)"
    d.stop("width 1024")
    assert (
        d.cut
        == "the 10 s budget stopped the run after 12.0 s: width 1024 not run (the results cover what ran)"
    )


def test_a_budget_from_the_command_start_counts_what_ran_before_it() -> None:
    """The command line marks its start first thing; a budget from it counts the imports after (in a
    test process that started long before, the process's own start would have eaten the budget)."""
    import time

    from tuneproof.core import deadline

    deadline.mark_command_start()
    time.sleep(0.2)
    d = Deadline.from_command_start(60.0, unit="batch")
    assert 0.2 <= d.elapsed() < 30.0 and d.unit == "batch"
