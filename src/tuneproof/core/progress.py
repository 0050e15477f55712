"""The one progress type every command's `run(plan, progress)` takes.

A long run reports in two ways: `progress(text)`, a line saying what runs now ("timing width 2048"),
and `progress.count(what, done, total)`, a count in a named phase and unit ("merging MiB", 512, 2048).
`progress` may be None (the library's default: nothing is shown). The command line passes
`core.terminal.terminal_progress()`: a spinner or a count bar per phase on stderr, and plain lines
off a terminal; a test passes `RecordedProgress()` and reads what was said.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@runtime_checkable
class Progress(Protocol):
    def __call__(self, text: str) -> None:
        """What runs now, in a few words."""

    def count(self, what: str, done: int, total: int) -> None:
        """`done` of `total` in the phase `what`, which names its unit ('merging MiB')."""


@dataclass(slots=True)
class RecordedProgress:
    """A `Progress` that keeps what it is told: `lines` and `counts` ((what, done, total) each)."""

    lines: list[str] = field(default_factory=list)
    counts: list[tuple[str, int, int]] = field(default_factory=list)

    def __call__(self, text: str) -> None:
        self.lines.append(text)

    def count(self, what: str, done: int, total: int) -> None:
        self.counts.append((what, done, total))


def mib_steps(progress: Progress | None, what: str, total_bytes: int) -> Callable[[int], None] | None:
    """A per-chunk callback `step(n_bytes)` for work that streams bytes, reporting the running total in
    MiB as the count of phase `what` (which names the unit: 'hashing MiB'); None without `progress`."""
    if progress is None:
        return None
    done = [0]

    def step(n: int) -> None:
        done[0] += n
        progress.count(what, done[0] >> 20, total_bytes >> 20)

    return step
