"""A command's time budget as a promise: work that would end past it is not started, and what runs past
it anyway (the floor a result needs) says so as it goes.

`Deadline(budget_s=...)` starts its clock when made. `fits(seconds)` says whether a piece of work of about
that many seconds ends inside the budget; a command asks it before each piece that can be left out (a
batch, a training step) and, when it cannot, stops with what it has measured, marked as cut
(`cut_note`). `status()` is appended to progress lines: nothing inside the budget, and past it, by how
much. The probe's own budget, with its floor and estimate, is `tuneproof.measure.budget`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(kw_only=True, slots=True)
class Deadline:
    budget_s: float
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=-1.0)
    cut: str | None = None  # what was left out, once the budget stopped the work
    unit: str = "step"  # what runs whole once started: "the step under way" past the budget

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.clock()

    @classmethod
    def from_command_start(cls, budget_s: float, unit: str = "step") -> Deadline:
        """A budget counted from the command line's start (`mark_command_start`, called first thing by
        `tuneproof.cli.app.main`), as a user's stopwatch counts a command: torch's and transformers'
        imports are inside it (tens of seconds on a busy machine). Without a mark, from now."""
        return cls(
            budget_s=budget_s,
            started=_COMMAND_STARTED[0] if _COMMAND_STARTED else time.monotonic(),
            unit=unit,
        )

    def elapsed(self) -> float:
        return self.clock() - self.started

    def fits(self, seconds: float) -> bool:
        """Whether `seconds` more work ends inside the budget."""
        return self.elapsed() + seconds <= self.budget_s

    def status(self) -> str:
        took = self.elapsed()
        if took <= self.budget_s:
            return ""
        past = took - self.budget_s
        return f" ({past:.0f} s past the {self.budget_s:g} s budget; finishing the {self.unit} under way)"

    def stop(self, what_is_left: str) -> None:
        """Record that the budget stopped the work, leaving out `what_is_left`."""
        self.cut = (
            f"the {self.budget_s:g} s budget stopped the run after {self.elapsed():.1f} s: {what_is_left} "
            "not run (the results cover what ran)"
        )


_COMMAND_STARTED: list[float] = []  # the command line's start, once marked


def mark_command_start() -> None:
    """The command line starts now (its budgets count from here)."""
    _COMMAND_STARTED[:] = [time.monotonic()]
