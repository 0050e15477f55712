"""The one progress type: what a run reports (`progress(text)`, `progress.count(what, done, total)`) and
how the command line shows it (one display at a time, closed when the other kind or phase reports)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tuneproof.core import terminal
from tuneproof.core.progress import Progress, RecordedProgress, mib_steps


def test_byte_steps_report_the_running_total_in_mib() -> None:
    said = RecordedProgress()
    step = mib_steps(said, "merging MiB", 3 << 20)
    assert step is not None and mib_steps(None, "merging MiB", 3 << 20) is None
    for n in (1 << 20, 1 << 19, 3 << 19):
        step(n)
    assert said.counts == [("merging MiB", 1, 3), ("merging MiB", 1, 3), ("merging MiB", 3, 3)]
    assert isinstance(said, Progress) and isinstance(terminal.PrintedProgress(), Progress)


def test_the_terminal_shows_one_display_and_switches_between_them(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []

    def display(name: str):  # type: ignore[no-untyped-def]
        @contextmanager
        def manager(*args: object) -> Iterator[object]:
            label = f"{name}({', '.join(map(str, args))})"
            events.append(f"open {label}")
            yield lambda *shown: events.append(f"{label} {shown}")
            events.append(f"close {label}")

        return manager

    monkeypatch.setattr(terminal, "progress_bar", display("spinner"))
    monkeypatch.setattr(terminal, "count_bar", display("bar"))
    with terminal.terminal_progress() as progress:
        progress("reading")
        progress("timing")
        progress.count("hashing MiB", 1, 4)
        progress.count("hashing MiB", 4, 4)
        progress.count("merging MiB", 2, 4)
    assert events == [
        "open spinner()", "spinner() ('reading',)", "spinner() ('timing',)", "close spinner()",
        "open bar(hashing MiB)", "bar(hashing MiB) (1, 4)", "bar(hashing MiB) (4, 4)",
        "close bar(hashing MiB)",
        "open bar(merging MiB)", "bar(merging MiB) (2, 4)", "close bar(merging MiB)",
    ]  # fmt: skip


def test_a_long_run_prints_every_line(capsys: pytest.CaptureFixture[str]) -> None:
    progress = terminal.PrintedProgress()
    progress("training")
    progress.count("steps", 3, 10)
    assert capsys.readouterr().err == "tuneproof: training\ntuneproof: steps 3/10\n"
