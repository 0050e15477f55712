"""`tuneproof train --budget`: a fine-tune that stops at its budget instead of running past it.

The Trainer has no time limit of its own. `BudgetStop` is a `TrainerCallback` on the run's own
Trainer: after each optimizer step it asks the run's `Deadline` whether one more step (as long as the
last one) still ends before the budget less a reserve (the report's probe, which runs after training);
when it does not, it asks the Trainer to save a checkpoint and stop, and records the step it stopped
at. The first step always runs: a budget shorter than one step still trains one, and says so.
`--resume` continues from that checkpoint.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from tuneproof.core.deadline import Deadline
from tuneproof.train.say import say


class BudgetStop(TrainerCallback):
    def __init__(self, deadline: Deadline, reserve_s: float = 0.0) -> None:
        self.deadline = deadline
        self.reserve_s = reserve_s
        self.step_started: float | None = None
        self.stopped_at: tuple[int, int] | None = None  # (step, max_steps) when the budget stopped it
        self.step_s = 0.0  # the last step's seconds

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.step_started = self.deadline.clock()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.step_started is None or state.global_step >= state.max_steps:
            return
        self.step_s = self.deadline.clock() - self.step_started
        if self.deadline.fits(self.step_s + self.reserve_s):
            return
        control.should_training_stop = True
        control.should_save = True
        self.stopped_at = (int(state.global_step), int(state.max_steps))
        if state.is_world_process_zero:
            say("tuneproof: " + self.line())

    def line(self) -> str:
        assert self.stopped_at is not None
        step, total = self.stopped_at
        return (
            f"the {self.deadline.budget_s:g} s budget stopped training at step {step} of {total} after "
            f"{self.deadline.elapsed():.0f} s (a step took about {self.step_s:.1f} s); a checkpoint is "
            "saved and resuming continues from it"
        )
