"""How tuneproof writes to a terminal: the console on stdout, progress on stderr, wrapped report lines.

Every area's `render(console)` draws on the console made here; progress goes to stderr so that stdout
holds the result alone (text or `--json`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def console() -> Any:
    """Rich console on stdout at the terminal's width (80 columns off a terminal, or $COLUMNS). A reader
    that goes away (`| head`) raises BrokenPipeError, which `main` turns into exit 141; rich's own
    handler would exit 1, a gate's FAIL code."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return _Console(highlight=False)


class Lines:
    """Progress off a terminal: a `progress: <what> (<elapsed>)` line on stderr once the work has run
    `after_s` seconds, then at most one every `every_s` seconds, and only when the description
    changed. Quick commands (and their one-line errors) print none; a log file or CI gets a heartbeat
    from long work, never a flood."""

    def __init__(self, after_s: float = 5.0, every_s: float = 10.0) -> None:
        import time

        self.clock = time.monotonic
        self.start = self.clock()
        self.after_s, self.every_s = after_s, every_s
        self.last: float | None = None
        self.printed = ""

    def __call__(self, text: str) -> None:
        now = self.clock()
        if now - self.start < self.after_s or text == self.printed:
            return
        if self.last is not None and now - self.last < self.every_s:
            return
        self.last, self.printed = now, text
        print(f"progress: {text} ({now - self.start:.0f} s)", file=sys.stderr, flush=True)


@contextmanager
def progress_bar() -> Iterator[Callable[[str], None]]:
    """Progress on stderr, yielding `update(description)`: a transient spinner with elapsed time on a
    terminal; off a terminal, a line after 5 s, then at most every 10 s (`Lines`); stdout is the result."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    if not err.is_terminal:
        yield Lines()
        return
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err, transient=True
    ) as bar:
        task = bar.add_task("starting", total=None)
        yield lambda msg: bar.update(task, description=msg)


@contextmanager
def count_bar(what: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar with a count and time left on stderr, yielding update(done, total); off a
    terminal, a plain `progress: <what> <done>/<total>` line after 5 s, then at most every 10 s."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    err = Console(stderr=True)
    if not err.is_terminal:
        lines = Lines()
        yield lambda done, total: lines(f"{what} {done}/{total}")
        return
    with Progress(
        what, BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err, transient=True
    ) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def wrap_lines(lines: list[str], width: int) -> list[str]:
    """Plain report lines wrapped to `width` at spaces. A `label     text` line (a word, then two or
    more spaces) continues under its text; other lines under their own indent. A word longer than the
    width (a path) stays whole on its own line."""
    import re
    import textwrap

    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        m = re.match(r"^(\s*\S+\s{2,})", line) or re.match(r"^(\s*)", line)
        indent = " " * len(m.group(1)) if m else ""
        wrapped = textwrap.wrap(
            line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        )
        out.extend(wrapped or [line])
    return out


def plain(console: Any, line: str) -> None:
    """A line as it is: no markup, emoji codes or highlighting, never wrapped."""
    console.print(line, markup=False, emoji=False, highlight=False, soft_wrap=True)


def gib(n: float) -> str:
    """A size in bytes as GiB from a quarter GiB up, MiB below: '1.50 GiB', '12.0 MiB'."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


class TerminalProgress:
    """The command line's `core.progress.Progress`: `progress(text)` on a spinner (`progress_bar`),
    `progress.count(what, done, total)` on a count bar per phase (`count_bar`), the previous display
    closed when the other kind, or the next phase, reports."""

    def __init__(self) -> None:
        self._open: tuple[str, Any, Callable[..., None]] | None = None  # kind or phase, manager, update

    def __call__(self, text: str) -> None:
        self._switch("\0say", progress_bar)(text)

    def count(self, what: str, done: int, total: int) -> None:
        self._switch(what, lambda: count_bar(what))(done, total)

    def _switch(self, key: str, make: Callable[[], Any]) -> Callable[..., None]:
        if self._open is None or self._open[0] != key:
            self.close()
            manager = make()
            self._open = (key, manager, manager.__enter__())
        return self._open[2]

    def close(self) -> None:
        if self._open is not None:
            self._open[1].__exit__(None, None, None)
            self._open = None


@contextmanager
def terminal_progress() -> Iterator[TerminalProgress]:
    """A `TerminalProgress` for one command, its display closed when the command ends."""
    progress = TerminalProgress()
    try:
        yield progress
    finally:
        progress.close()


class PrintedProgress:
    """A `core.progress.Progress` that prints every line on stderr as it comes (`tuneproof: <line>`), for a
    run whose phases are minutes apart (`tuneproof train`); counts as `<what> <done>/<total>`."""

    def __call__(self, text: str) -> None:
        print(f"tuneproof: {text}", file=sys.stderr, flush=True)

    def count(self, what: str, done: int, total: int) -> None:
        self(f"{what} {done}/{total}")
