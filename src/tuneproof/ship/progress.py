"""Progress of the shipping work, which streams bytes in phases (hash the base, then merge it).

A run reports `progress(what, done, total)`: `what` names the phase and its unit (`merging MiB`),
`done` and `total` count that unit. `phase_bars` shows it on stderr as one count bar per phase.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

Progress = Callable[[str, int, int], None]  # (phase and unit, done, total)


def mib_steps(progress: Progress | None, what: str, total_bytes: int) -> Callable[[int], None] | None:
    """A per-chunk callback `step(n_bytes)` that reports the running total in MiB as phase `what`
    (which names the unit: 'hashing MiB'); None without `progress`."""
    if progress is None:
        return None
    done = [0]

    def step(n: int) -> None:
        done[0] += n
        progress(what, done[0] >> 20, total_bytes >> 20)

    return step


@contextmanager
def phase_bars() -> Iterator[Progress]:
    """A `Progress` shown on stderr: a count bar per phase (`tuneproof.core.terminal.count_bar`), the
    previous phase's bar closed when the next phase reports."""
    from tuneproof.core.terminal import count_bar

    open_bar: list[Any] = [None, None, None]  # phase, its context manager, its update(done, total)

    def update(what: str, done: int, total: int) -> None:
        if open_bar[0] != what:
            _close(open_bar[1])
            bar: AbstractContextManager[Callable[[int, int], None]] = count_bar(what)
            open_bar[:] = [what, bar, bar.__enter__()]
        open_bar[2](done, total)

    try:
        yield update
    finally:
        _close(open_bar[1])


def _close(bar: AbstractContextManager[Any] | None) -> None:
    if bar is not None:
        bar.__exit__(None, None, None)
