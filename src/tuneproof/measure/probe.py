"""The probe's engine (the command is `tuneproof.commands.probe`): time a real training step at several
widths, fit t = A*w + B*w^2, profile every width, and cross-check the fit's quadratic share against the
attention kernels' (like with like).

The two methods share no assumptions: one times whole steps, the other reads kernel names. Timing is
interleaved across widths with outliers set aside (`tuneproof.measure.timing`); profiles are
interleaved the same way, `profiles` per width. A training step is forward, loss and backward, no
optimizer; `forward` mode times the forward only.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuneproof.arch import ResolvedModel
from tuneproof.attention.paths import names as path_names
from tuneproof.attention.paths import path
from tuneproof.core import validate
from tuneproof.core.dtypes import MODEL_DTYPES
from tuneproof.core.errors import TuneproofError
from tuneproof.measure.budget import OVER_BUDGET, WholeBudget
from tuneproof.measure.fit import MIN_SPAN, MIN_WIDTHS
from tuneproof.measure.kernels import CLASSES, PROFILE_COLUMNS, KernelTable, kernel_table
from tuneproof.measure.probe_result import timing_rows
from tuneproof.measure.steps import probe_model, width_steps
from tuneproof.measure.timing import Interleaved, time_interleaved
from tuneproof.runs.run import Run
from tuneproof.runs.step import Step
from tuneproof.trace.read import load_trace

DEVICES = ("cpu", "cuda")


@dataclass(kw_only=True, frozen=True, slots=True)
class ProbeSetup:
    """What the probe times and how hard it measures.

    `run`: what each timed step trains (`runs.run.Run`: the attention path, forward/full/LoRA and its
    targets, checkpointing), taken at each of `widths` with `batch` rows (`Run.step`).
    `min_repeats`/`max_repeats`/`target`: timing rounds continue until every width's median is known
    to +-target (needs `min_repeats`), up to `max_repeats` rounds or the budget. `budget_s`: seconds for
    the whole probe (build, warm-up, rounds, profiles, peak; `tuneproof.measure.budget`); a floor that
    cannot fit in it is refused (`over_budget` "refuse") or run alone ("floor"). `profiles`: profiled
    steps per width (2 or more give the kernel side an interval)."""

    run: Run
    widths: tuple[int, ...] = (512, 1024, 2048)
    batch: int = 1
    device: str = "cpu"
    dtype: str | None = None  # None: fp32 on CPU, bf16 on CUDA
    min_repeats: int = 6
    max_repeats: int = 30
    budget_s: float = 60.0
    target: float = 0.05
    profiles: int = 3
    seed: int = 0
    over_budget: str = "refuse"

    def step(self, width: int) -> Step:
        """The run's step at `width`, `batch` rows."""
        return self.run.step(width=width, rows=self.batch)

    # what the step trains, as the probe's records name it
    @property
    def attn(self) -> str:
        return self.step(max(self.widths)).attn

    @property
    def mode(self) -> str:
        return self.step(max(self.widths)).mode

    @property
    def grad_ckpt(self) -> bool:
        return self.run.grad_ckpt

    @property
    def lora_rank(self) -> int:
        return self.run.lora_r

    @property
    def lora_targets(self) -> tuple[str, ...] | None:
        """Module paths inside a layer; None: every linear (all-linear)."""
        own = tuple(self.run.targets)
        return None if own in ((), ("all-linear",)) else own

    def to_dict(self) -> dict[str, Any]:
        return {
            "attn": self.attn, "widths": self.widths, "batch": self.batch, "mode": self.mode,
            "grad_ckpt": self.grad_ckpt, "device": self.device, "dtype": self.dtype,
            "lora_rank": self.lora_rank, "lora_targets": self.lora_targets, "min_repeats": self.min_repeats,
            "max_repeats": self.max_repeats, "budget_s": self.budget_s, "target": self.target,
            "profiles": self.profiles, "seed": self.seed, "over_budget": self.over_budget,
        }  # fmt: skip

    def __post_init__(self) -> None:
        widths = validate.integers("widths", self.widths, low=2)
        if len(set(widths)) < MIN_WIDTHS:
            raise TuneproofError(
                f"{{widths}} needs at least {MIN_WIDTHS} distinct widths, got {list(widths)}",
                "e.g. 512,1024,2048",
                fields=("widths",),
            )
        if max(widths) / min(widths) < MIN_SPAN:
            raise TuneproofError(
                f"{{widths}} span {max(widths) / min(widths):.2f}x, the fit needs {MIN_SPAN:g}x",
                f"add a width of {int(min(widths) * MIN_SPAN)} or more",
                fields=("widths",),
            )
        validate.choice("attn", self.attn, path_names(probe=True))
        validate.choice("device", self.device, DEVICES)
        if self.dtype is not None:
            validate.choice("dtype", self.dtype, MODEL_DTYPES)
        validate.integer("batch", self.batch, high=1 << 16, hint="sequences per step")
        validate.integer("lora_rank", self.lora_rank, high=1 << 16, hint="the adapter rank r")
        validate.integer(
            "min_repeats", self.min_repeats, low=3, high=10_000, hint="outliers need three repeats"
        )
        if type(self.max_repeats) is int and self.max_repeats < self.min_repeats:
            raise TuneproofError(
                f"{{max_repeats}} {self.max_repeats} is below {{min_repeats}} {self.min_repeats}",
                "raise {max_repeats} or lower {min_repeats}",
                fields=("max_repeats", "min_repeats"),
            )
        validate.integer(
            "max_repeats", self.max_repeats, low=self.min_repeats, high=10_000, hint="timing rounds at most"
        )
        validate.real("budget_s", self.budget_s, low=0.0, low_open=True, hint="seconds for the whole probe")
        validate.choice("over_budget", self.over_budget, OVER_BUDGET)
        validate.real(
            "target",
            self.target,
            low=0.0,
            low_open=True,
            high=1.0,
            hint="a median's relative 95 % half-width",
        )
        validate.integer("profiles", self.profiles, high=100, hint="profiled steps per width")
        validate.integer("seed", self.seed, low=0, high=2**63 - 1, hint="a non-negative integer")
        if not path(self.attn).backward_on_cpu and self.device == "cpu" and self.mode != "forward":
            raise TuneproofError(
                f"{self.attn} has no backward on CPU (PyTorch raises NotImplementedError)",
                "use mode forward, another attention path, or a CUDA device",
            )

    @property
    def torch_dtype(self) -> str:
        return self.dtype or ("bf16" if self.device == "cuda" else "fp32")


OUT_FILES = ("points.csv", "kernels.csv", "trace.json.gz", "probe.json")  # what `--out` receives


WIDTH_FLOOR = 16  # a probe's narrowest width at least this (narrower steps are all overhead)


def span_widths(widths: Any) -> tuple[int, ...] | None:
    """Three widths to probe for a run with these widths: its widest, a quarter of it or its narrowest
    if narrower, and their geometric middle; None when the widest is too narrow for a 4x span."""
    hi = int(max(widths))
    lo = max(min(int(min(widths)), int(hi / MIN_SPAN)), WIDTH_FLOOR)
    if hi / lo < MIN_SPAN:
        return None
    return (lo, round(math.sqrt(lo * hi)), hi)


def check_probe(model: ResolvedModel, spec: ProbeSetup) -> None:
    """Everything that can be refused before building the model: positions, device, memory."""
    from tuneproof.core.extras import require
    from tuneproof.measure.model import check_fits_on_cpu, check_positions

    check_positions(model, spec.widths)
    if spec.mode == "lora":
        require("train", "a LoRA probe (mode lora)", ("peft",))
    if spec.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise TuneproofError("{device} cuda but torch sees no CUDA device", "use cpu", fields=("device",))
    else:
        check_fits_on_cpu(
            model, attn=spec.attn, batch=spec.batch, width=max(spec.widths), training=spec.mode != "forward"
        )


def time_widths(
    model: ResolvedModel,
    spec: ProbeSetup,
    progress: Callable[[str], None] | None = None,
    net: Any = None,
    budget: WholeBudget | None = None,
) -> tuple[dict[int, Callable[[], None]], Interleaved[int]]:
    """The timing half of the probe: (each width's step, the interleaved timing rounds), on `net` (a
    `probe_model`) or a model built here. Widths that run out of memory are skipped; fewer than three
    left is an error naming why. `budget`: the whole probe's (None: `spec.budget_s` of timing alone)."""
    steps = model_steps(model, spec) if net is None else width_steps(net, spec, int(model.config.vocab_size))
    timed: dict[str, Any] = {}
    if budget is not None:
        budget.calibrate = lambda w: _time_profile(steps[w], spec.device, budget.clock)  # type: ignore[index]
        timed = {
            "after_first": budget.after_first_round,
            "after_round": budget.after_round,
            "clock": budget.clock,
        }
    timing = time_interleaved(
        steps,
        warmup=1,
        min_repeats=spec.min_repeats,
        max_repeats=spec.max_repeats,
        budget_s=spec.budget_s,
        target=spec.target,
        progress=progress,
        **timed,
    )
    if len(timing.timings) < MIN_WIDTHS:
        raise TuneproofError(
            f"only {len(timing.timings)} width(s) ran ("
            + ", ".join(f"{w}: {r}" for w, r in timing.skipped.items())
            + ")",
            "use smaller widths or batch",
        )
    return steps, timing


def model_steps(model: ResolvedModel, spec: ProbeSetup) -> dict[int, Callable[[], None]]:
    """One training (or forward) step per width on `model` built with random weights; a step that
    runs out of memory raises `Skip` so that its width is dropped with the reason."""
    return width_steps(probe_model(model, spec), spec, int(model.config.vocab_size))


def profile_widths(
    steps: dict[int, Callable[[], None]],
    spec: ProbeSetup,
    tmp: Path,
    keep: Path,
    progress: Callable[[str], None] | None,
    budget: WholeBudget | None = None,
) -> tuple[dict[int, list[dict[str, float]]], dict[int, list[float]], KernelTable]:
    """Profile every width `spec.profiles` times, interleaved like the timing. A profile whose total
    is an outlier among its width's (`robust.outliers`, from 3 profiles on) is set aside and the width
    profiled again, up to twice `spec.profiles` rounds. Under a `budget`, every round after the first
    runs only when it fits before the budget's promise (the cut is said). Returns the kept class times
    per width, the set-aside totals per width, and the largest width's first kernel table (its trace
    kept at `keep`)."""
    from tuneproof.measure import robust

    widths = sorted(steps)
    records: dict[int, list[dict[str, float]]] = {w: [] for w in widths}
    first: KernelTable | None = None
    per_width_s = 0.0  # the last round's seconds per profile

    def kept(w: int) -> list[dict[str, float]]:
        flags = robust.outliers([sum(p.values()) for p in records[w]])
        return [records[w][i] for i in np.flatnonzero(~flags)]

    for round_ in range(2 * spec.profiles):
        todo = [w for w in widths if round_ < spec.profiles or len(kept(w)) < spec.profiles]
        if not todo:
            break
        if budget is not None and round_ and not budget.room_for(per_width_s * len(todo)):
            budget.say(_profiles_cut(records, spec.profiles, per_width_s * len(todo)))
            break
        started = budget.clock() if budget is not None else 0.0
        shift = round_ % len(todo)
        for w in todo[shift:] + todo[:shift]:
            if progress:
                progress(f"profile round {round_ + 1}: width {w}")
            trace = tmp / f"p{round_}_{w}.json"
            _profile(steps[w], spec.device, trace)
            table = kernel_table(load_trace(trace))
            records[w].append({**{c: table.ms.get(c, 0.0) for c in CLASSES}, "idle": table.idle_ms})
            if w == widths[-1] and first is None:
                first = table
                trace.replace(keep)
            else:
                trace.unlink()
        if budget is not None:
            per_width_s = (budget.clock() - started) / len(todo)
            budget.profiled(per_width_s * len(todo))
    assert first is not None
    aside = {w: [sum(p.values()) for p in records[w] if p not in kept(w)] for w in widths}
    return {w: kept(w) for w in widths}, aside, first


def _profiles_cut(records: dict[int, list[dict[str, float]]], asked: int, round_s: float) -> str:
    done = sorted({len(r) for r in records.values()})
    took = str(done[0]) if done[0] == done[-1] else f"{done[0]} to {done[-1]}"
    return (
        f"profiles cut at {took} of the {asked} per width: another round (about {round_s:.3g} s) would "
        "end past the budget; the kernel side has fewer profiles than asked"
    )


def _time_profile(step: Callable[[], None], device: str, clock: Callable[[], float]) -> float:
    """Seconds of one profiled step as `profile_widths` takes it (profile, trace read, kernel table):
    what the budget's estimate of the profiles is made from (`measure.budget`)."""
    start = clock()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "calibrate.json"
        _profile(step, device, trace)
        kernel_table(load_trace(trace))
    return clock() - start


def _profile(step: Callable[[], None], device: str, path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with _quiet_stderr(), profile(activities=activities) as prof:
        step()
        if device == "cuda":
            import torch

            torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Kineto prints 'USDT: profiler_start/stop' lines straight to fd 2; keep them off the user's terminal.
    Python exceptions still propagate."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def keep_files(
    out: Path, trace: Path, timing: Interleaved[int], kernel_ms: dict[int, list[dict[str, float]]]
) -> dict[str, str]:
    """Write the points CSV, the kernel-class CSV and the gzipped trace into `out`, each atomically."""
    import gzip

    from tuneproof.core.io import atomic_write_bytes, atomic_write_text

    ws, ts = timing_rows(timing)
    csv = "width,seconds\n" + "".join(f"{int(w)},{float(t)!r}\n" for w, t in np.column_stack([ws, ts]))
    points = atomic_write_text(out / "points.csv", csv)
    rows = "".join(
        f"{w},{i}," + ",".join(f"{p[c]!r}" for c in PROFILE_COLUMNS) + "\n"
        for w, profiles in sorted(kernel_ms.items())
        for i, p in enumerate(profiles)
    )
    header = "width,profile," + ",".join(f"{c}_ms" for c in PROFILE_COLUMNS) + "\n"
    kernels = atomic_write_text(out / "kernels.csv", header + rows)
    trace_gz = atomic_write_bytes(out / "trace.json.gz", gzip.compress(trace.read_bytes()))
    return {"points": str(points), "kernels": str(kernels), "trace": str(trace_gz)}


def probe_peak(spec: ProbeSetup) -> Any:
    """The MFU denominator: the table peak for a known GPU, the measured peak otherwise (the CPU
    included), through `hardware.gpus.resolve_peak`, with the reason."""
    from tuneproof.hardware.gpus import resolve_peak
    from tuneproof.measure.peak import measure_peak

    gpu = None
    if spec.device == "cuda":
        import torch

        gpu = torch.cuda.get_device_name()

    # half a second per GEMM size: the MFU's context, not a benchmark (`tuneproof peak` takes longer)
    def measure() -> Any:
        return measure_peak(spec.device, spec.torch_dtype, max_seconds=0.5).as_peak()

    return resolve_peak(gpu, spec.torch_dtype, measure=measure)
