"""Entry point. Parses arguments and delegates; heavy modules load inside the commands.

User errors (`TuneproofError`, bad flags) print `error: <what> (<how to fix>)` to stderr and exit 2,
without a traceback.
"""

from __future__ import annotations

import os
import sys

import click

from tuneproof.cli.adjudicate_cmd import adjudicate
from tuneproof.cli.attractors_cmd import attractors
from tuneproof.cli.buckets_cmd import buckets
from tuneproof.cli.doctor_cmd import doctor
from tuneproof.cli.explain_cmd import explain
from tuneproof.cli.fit_cmd import fit
from tuneproof.cli.flops_cmd import flops
from tuneproof.cli.gate_cmd import gate
from tuneproof.cli.generate_cmd import generate
from tuneproof.cli.kernels_cmd import kernels
from tuneproof.cli.memory_cmd import memory
from tuneproof.cli.peak_cmd import peak
from tuneproof.cli.plan_cmd import plan
from tuneproof.cli.preflight_cmd import preflight
from tuneproof.cli.probe_cmd import probe
from tuneproof.cli.ship_cmd import fingerprint, lora, merge, quant_audit
from tuneproof.cli.tokens_cmd import tokens
from tuneproof.cli.train_cmd import train
from tuneproof.core.errors import TuneproofError


@click.group(
    name="tuneproof", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
)
@click.version_option(package_name="tuneproof")
def app() -> None:
    """Honest numbers for LLM fine-tuning runs. Every number says what it counts."""


app.add_command(flops)
app.add_command(adjudicate)
app.add_command(attractors)
app.add_command(doctor)
app.add_command(explain)
app.add_command(buckets)
app.add_command(fit)
app.add_command(gate)
app.add_command(generate)
app.add_command(kernels)
app.add_command(memory)
app.add_command(peak)
app.add_command(probe)
app.add_command(lora)
app.add_command(fingerprint)
app.add_command(merge)
app.add_command(quant_audit)
app.add_command(train)
app.add_command(plan)
app.add_command(preflight)
app.add_command(tokens)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script exits with it)."""
    from tuneproof.core.deadline import mark_command_start

    mark_command_start()  # the budgets of train and adjudicate count from here, imports included
    try:
        code = app.main(args=argv, prog_name="tuneproof", standalone_mode=False)
        if isinstance(code, int) and not isinstance(code, bool):
            return code  # click hands back an Exit's code (a verdict) in non-standalone mode
    except TuneproofError as e:
        print(f"error: {_one_line(e.message)}", file=sys.stderr)
        return e.exit_code
    except click.exceptions.NoArgsIsHelpError as e:
        print(e.ctx.get_help() if e.ctx else str(e))
        return 0
    except click.UsageError as e:
        hint = f"see '{e.ctx.command_path} --help'" if e.ctx else "see 'tuneproof --help'"
        print(f"error: {_one_line(e.format_message())} ({hint})", file=sys.stderr)
        return 2
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.Abort:
        print("error: aborted", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader went away (`| head`): say nothing more, and exit as a process killed by SIGPIPE would,
        # never with a verdict's code
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return 0


def _one_line(text: str) -> str:
    return " ".join(text.split())


def run() -> None:
    """The console script: SIGTERM stops a command as Ctrl-C does (its cleanups run, exit 143), and once
    the command has ended, further signals no longer interrupt the exit."""
    from tuneproof.core.interrupts import ignore_interrupts, sigterm_raises

    with sigterm_raises():
        code = main()
    ignore_interrupts()
    sys.exit(code)
