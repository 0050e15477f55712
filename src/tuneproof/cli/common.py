"""What every command shares: the command class, the options spelled the same everywhere, output."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from tuneproof.core.errors import TuneproofError
from tuneproof.core.interrupts import TERMINATED, Terminated
from tuneproof.core.io import check_out_file as check_out_file
from tuneproof.core.terminal import Lines as Lines
from tuneproof.core.terminal import console as console
from tuneproof.core.terminal import terminal_progress as terminal_progress
from tuneproof.core.terminal import wrap_lines as wrap_lines

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process stopped by Ctrl-C


class PathParam(click.Path):
    """click's Path, as a `pathlib.Path`, refusing an empty value: `Path("")` is ".", the current
    folder, which nobody means by '' (a merge took the folder it ran in as its base)."""

    def __init__(self) -> None:
        super().__init__(path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty: pass a path", param, ctx)
        return super().convert(value, param, ctx)


PATH = PathParam()  # the type of every path a command takes


class Command(click.Command):
    """A command whose library errors name its own flags: a `TuneproofError` about the field
    `seq_len` is shown as `--seq-len` (the option whose parameter name is that field). Warnings
    (`warn`) are printed to stderr once the command has succeeded, so that an error stays one line.
    A command that returns an int exits with it (a verdict's exit code), after its warnings. An option
    that takes one value given twice is refused (click would keep the last without a word)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        _refuse_repeats(self, ctx, args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        ctx.meta["tuneproof.warnings"] = []
        try:
            result = super().invoke(ctx)
        except TuneproofError as e:
            labels = {p.name: p.opts[0] for p in self.params if isinstance(p, click.Option) and p.name}
            labels |= {
                p.name: p.human_readable_name for p in self.params if isinstance(p, click.Argument) and p.name
            }
            raise e.with_labels(labels) from None
        except KeyboardInterrupt as e:
            # caught here, before click turns it into Abort (exit 1, a verdict's code, after a blank line)
            if isinstance(e, Terminated):
                raise TuneproofError("terminated (SIGTERM)", exit_code=TERMINATED) from None
            raise TuneproofError("interrupted", exit_code=INTERRUPTED) from None
        for text in ctx.meta["tuneproof.warnings"]:
            print(f"warning: {text}", file=sys.stderr)
        if isinstance(result, int) and not isinstance(result, bool) and result:
            raise click.exceptions.Exit(result)
        return result


def _refuse_repeats(cmd: click.Command, ctx: click.Context, args: list[str]) -> None:
    """A usage error for an option that takes one value (or a flag) given more than once."""
    single: dict[str, click.Option] = {}
    for p in cmd.params:
        if isinstance(p, click.Option) and not p.multiple and not p.count:
            single |= {name: p for name in (*p.opts, *p.secondary_opts)}
    seen: dict[str, str] = {}
    for i, token in enumerate(args):
        if token == "--":
            break
        option = single.get(token.split("=", 1)[0]) if token.startswith("-") else None
        if option is None:
            continue
        if "=" in token:
            value = token.split("=", 1)[1]
        elif option.is_flag:
            value = token
        else:
            value = args[i + 1] if i + 1 < len(args) else ""
        name = option.opts[0]
        if name in seen:
            raise click.UsageError(
                f"{name} is given twice ({seen[name]!r}, then {value!r}): give it once", ctx=ctx
            )
        seen[name] = value


def warn(text: str) -> None:
    """A warning for the running command, printed after it succeeds."""
    click.get_current_context().meta.setdefault("tuneproof.warnings", []).append(text)


def command(**kwargs: Any) -> Callable[[Callable[..., Any]], click.Command]:
    return click.command(cls=Command, **kwargs)


def step_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The micro-batch's geometry, as `flops` and `memory` take it: --seq-len, --batch, --attn,
    --padding-fraction."""
    from tuneproof.attention.paths import names

    for option in reversed((
        click.option("--seq-len", type=int, required=True, help="Padded width T of every sequence, tokens."),
        click.option("--batch", type=int, default=1, show_default=True, help="Sequences per micro-batch, B."),
        click.option("--attn", default="sdpa", show_default=True,
                     help="Attention path: " + ", ".join(names()) + "."),
        click.option("--padding-fraction", type=float, default=0.0, show_default=True,
                     help="Share of the B*T token slots that are padding, in [0, 1)."),
    )):  # fmt: skip
        f = option(f)
    return f


def lora_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The adapters, as `flops` and `memory` take them: --lora-rank, --lora-targets,
    --lora-target-parameters, and --grad-ckpt."""
    for option in reversed((
        click.option("--lora-rank", type=int, default=16, show_default=True,
                     help="LoRA rank r (with --mode lora)."),
        click.option("--lora-targets", default="all-linear", show_default=True,
                     help="Comma list of nn.Linear names (PEFT target_modules), all-linear (every "
                     "nn.Linear but lm_head), or none (adapters on --lora-target-parameters only)."),
        click.option("--lora-target-parameters", multiple=True,
                     help="Fused expert parameter names (PEFT target_parameters, e.g. experts.gate_up_proj), "
                     "repeatable or a comma list; rank --lora-rank per expert."),
        click.option("--grad-ckpt", is_flag=True, help="Activation checkpointing on every decoder layer."),
    )):  # fmt: skip
        f = option(f)
    return f


# Options every command spells the same way.
config_option = click.option(
    "--config",
    default="tiny",
    show_default=True,
    help="config.json path (or its folder), or a hub id such as meta-llama/Llama-3.2-1B[@revision] "
    "read from the local Hugging Face cache (HF_HUB_CACHE or HF_HOME; never downloaded); "
    "'tiny' = the embedded Gemma-4-style model.",
)
lengths_option = click.option(
    "--lengths",
    "lengths_file",
    type=PATH,
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
        help=f"Seconds for the whole probe of {what}: model build, warm-up, timing rounds, profiles, peak.",
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


S = TypeVar("S")


def with_model(spec: S) -> S:
    """`spec` (checked on construction, before any model is read) with its --config resolved, the
    model's notes warned about on stderr; `prepare` then takes the model as it is."""
    from dataclasses import replace

    return replace(spec, model=resolve_model(spec.model))  # type: ignore[type-var, attr-defined]


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
    `result` is a `tuneproof.core.verdict.Result`."""
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
    from tuneproof.core.io import dumps

    sys.stdout.write(dumps(data) + "\n")


def int_list(text: str, flag: str) -> tuple[int, ...]:
    """A comma list of integers from a flag, or a one-line error naming the flag (an empty item too:
    `32768,,65536` is a typo, not two widths)."""
    items = text.split(",")
    if len(items) > 1 and not all(x.strip() for x in items):
        raise TuneproofError(f"{flag} {text!r} has an empty item", f"e.g. {flag} 512,1024,2048")
    try:
        return tuple(int(x) for x in items if x.strip())
    except ValueError:
        raise TuneproofError(
            f"{flag} {text!r} is not a comma list of integers", f"e.g. {flag} 512,1024,2048"
        ) from None


def target_parameters(given: tuple[str, ...]) -> tuple[str, ...]:
    """--lora-target-parameters, repeated or comma-separated; an empty one is refused (it names no
    parameter, and silently meant none)."""
    if any(not g.strip() for g in given):
        raise TuneproofError(
            "--lora-target-parameters '' names no parameter", "give a parameter name, or drop the option"
        )
    return str_list(",".join(given), "--lora-target-parameters")


def step_fit(text: str, flag: str) -> Any:
    """`A,B` or `A,B,C` (seconds: t = C + A*w + B*w^2 per sequence) as a `StepCost`, or one line."""
    import math

    from tuneproof.data.compare import CASE_FIT_TEXT
    from tuneproof.data.ranks import StepCost

    parts = [x.strip() for x in text.split(",")]
    try:
        values = [float(x) for x in parts]
    except ValueError:
        values = []
    if len(values) not in (2, 3) or not all(math.isfinite(v) for v in values):
        raise TuneproofError(
            f"{flag} {text!r} is not A,B (or A,B,C): finite numbers of t = C + A*w + B*w^2 per sequence",
            f"e.g. {flag} {CASE_FIT_TEXT}",
        )
    a, b, *c = values
    try:
        return StepCost(a=a, b=b, c=c[0] if c else 0.0)
    except TuneproofError as e:
        raise TuneproofError(f"{flag}: {e.what}", e.hint) from None


def str_list(text: str, flag: str = "the list") -> tuple[str, ...]:
    """A comma list of names; an empty item between others is refused (an empty whole stays empty,
    for the command to name)."""
    items = [x.strip() for x in text.split(",")]
    if len(items) > 1 and not all(items):
        raise TuneproofError(f"{flag} {text!r} has an empty item", "drop the extra comma")
    return tuple(x for x in items if x)
