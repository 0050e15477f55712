"""What every command shares: the command class, the options spelled the same everywhere, output."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from tuneproof.errors import TuneproofError

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process stopped by Ctrl-C


class Command(click.Command):
    """A command whose library errors name its own flags: a `TuneproofError` about the field
    `seq_len` is shown as `--seq-len` (the option whose parameter name is that field). Warnings
    (`warn`) are printed to stderr once the command has succeeded, so that an error stays one line.
    A command that returns an int exits with it (a verdict's exit code), after its warnings."""

    def invoke(self, ctx: click.Context) -> Any:
        ctx.meta["tuneproof.warnings"] = []
        try:
            result = super().invoke(ctx)
        except TuneproofError as e:
            labels = {p.name: p.opts[0] for p in self.params if isinstance(p, click.Option) and p.name}
            raise e.with_labels(labels) from None
        except KeyboardInterrupt:
            # caught here, before click turns it into Abort (exit 1, a verdict's code, after a blank line)
            raise TuneproofError("interrupted", exit_code=INTERRUPTED) from None
        for text in ctx.meta["tuneproof.warnings"]:
            print(f"warning: {text}", file=sys.stderr)
        if isinstance(result, int) and not isinstance(result, bool) and result:
            raise click.exceptions.Exit(result)
        return result


def warn(text: str) -> None:
    """A warning for the running command, printed after it succeeds."""
    click.get_current_context().meta.setdefault("tuneproof.warnings", []).append(text)


def command(**kwargs: Any) -> Callable[[Callable[..., Any]], click.Command]:
    return click.command(cls=Command, **kwargs)


# Options every command spells the same way.
config_option = click.option(
    "--config",
    default="tiny",
    show_default=True,
    help="config.json path (or its folder); 'tiny' = the embedded Gemma-4-style model.",
)
lengths_option = click.option(
    "--lengths",
    "lengths_file",
    type=click.Path(path_type=Path),
    default=None,
    help="One integer per line, or JSONL with 'length' (and 'root'); .gz too. "
    "Default: the shipped synthetic set.",
)


def probe_budget_option(what: str) -> Callable[[Callable[..., Any]], Any]:
    return click.option(
        "--probe-budget",
        "probe_budget_s",
        type=float,
        default=30.0,
        show_default=True,
        help=f"Seconds of timing rounds for {what}.",
    )


json_option = click.option(
    "--json", "json_out", is_flag=True, help="Print one JSON object instead of tables."
)


def resolve_model(config: str) -> Any:
    """The model behind --config; fields taken from transformers' defaults are warned about on stderr."""
    from tuneproof.arch import resolve

    model = resolve(config)
    for note in model.notes:
        warn(note)
    return model


def warn_unused(params: tuple[str, ...], needs: str, active: bool) -> None:
    """Warn on stderr about options the user set that have no effect unless `needs` holds."""
    if active:
        return
    ctx = click.get_current_context()
    for name in params:
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            flag = next(p.opts[0] for p in ctx.command.params if p.name == name)
            warn(f"{flag} has no effect without {needs}")


def finish(result: Any, json_out: bool) -> int:
    """The last line of every command: the result's warnings (printed after success), its
    `to_dict()` as JSON or its `render(console)` as text, and its verdict's exit code (0 without one).
    `result` is a `tuneproof.verdict.Result`."""
    for text in result.warnings:
        warn(text)
    if json_out:
        print_json(result.to_dict())
    else:
        result.render(console())
    verdict = result.verdict
    return verdict.exit_code if verdict is not None else 0


def print_json(data: Any) -> None:
    """Strict JSON on stdout: never NaN or Infinity (an unknown is null, with its reason beside it)."""
    from tuneproof.io import dumps

    sys.stdout.write(dumps(data) + "\n")


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


class _Lines:
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
    terminal; off a terminal, a line after 5 s, then at most every 10 s (`_Lines`); stdout is the result."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    if not err.is_terminal:
        yield _Lines()
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
        lines = _Lines()
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


def check_out_file(out: Path, inputs: tuple[Path | str, ...] = ()) -> Path:
    """Refuse an output file path that cannot be written (a folder, an empty path, a path under a file,
    an unwritable folder) or that is one of the command's `inputs` (writing it would destroy them), before
    any work starts."""
    from tuneproof.io import check_out_folder

    if str(out) in ("", ".") or out.name in ("", ".", ".."):
        raise TuneproofError(
            f"--out {str(out)!r} is empty or a folder, not a file path",
            "pass a file path, e.g. --out result.json",
        )
    if out.exists() and not out.is_file():
        raise TuneproofError(f"{out} exists and is not a file", "pass a file path for --out")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise TuneproofError(f"--out {out} cannot be created: {parent} is a file, not a folder")
            break
    for source in inputs:
        if _same_file(out, Path(source)):
            raise TuneproofError(
                f"--out {out} is also an input of this command: writing it would destroy that input",
                "pass another output path",
            )
    check_out_folder(out.parent)
    return out


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False


def int_list(text: str, flag: str) -> tuple[int, ...]:
    """A comma list of integers from a flag, or a one-line error naming the flag."""
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise TuneproofError(
            f"{flag} {text!r} is not a comma list of integers", f"e.g. {flag} 512,1024,2048"
        ) from None


def step_fit(text: str, flag: str) -> Any:
    """`A,B` or `A,B,C` (seconds: t = C + A*w + B*w^2 per sequence) as a `StepCost`, or one line."""
    import math

    from tuneproof.data.ranks import StepCost

    parts = [x.strip() for x in text.split(",")]
    try:
        values = [float(x) for x in parts]
    except ValueError:
        values = []
    if len(values) not in (2, 3) or not all(math.isfinite(v) for v in values):
        raise TuneproofError(
            f"{flag} {text!r} is not A,B (or A,B,C): finite numbers of t = C + A*w + B*w^2 per sequence",
            f"e.g. {flag} 6.87e-4,8.85e-8",
        )
    a, b, *c = values
    try:
        return StepCost(a, b, c[0] if c else 0.0)
    except TuneproofError as e:
        raise TuneproofError(f"{flag}: {e.what}", e.hint) from None


def str_list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())
