"""`tuneproof probe`: time a step at several widths, fit t = A*w + B*w^2, profile every width and
cross-check the two (`measure.probe`, the probe's engine, which the doctor, the plan and the train report
run too). A `ProbeSpec`, `prepare(spec)` (every cheap check before a model is built) and
`run(plan, progress, notice, clock)`: a `ProbeResult`. The engine's steps are looked up on its module
when they run, so a test that replaces one (the profiler, the model) replaces it here too."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneproof.arch import ResolvedModel
from tuneproof.core.progress import Progress
from tuneproof.measure import probe as engine
from tuneproof.measure.probe import ProbeSetup
from tuneproof.measure.probe_result import ProbeResult, analyse
from tuneproof.runs.run import Run

__all__ = ["ProbePlan", "ProbeSpec", "prepare", "run"]


@dataclass(kw_only=True, frozen=True, slots=True)
class ProbeSpec:
    """What to probe: `model`, a config ("tiny", a config.json or its folder, a hub id in the local
    cache) read by `prepare`, or a model already resolved; `probe`, what each timed step trains and how
    hard to measure (`measure.probe.ProbeSetup`); `out`, the folder for the trace and the fit (None: nothing
    written). `ProbeSpec.of(...)` takes the command's flags."""

    model: str | Path | ResolvedModel = "tiny"
    probe: ProbeSetup
    out: Path | None = None

    @classmethod
    def of(
        cls,
        *,
        model: str | Path | ResolvedModel = "tiny",
        out: Path | None = None,
        attn: str = "sdpa",
        mode: str = "full",
        grad_ckpt: bool = False,
        lora_rank: int = 16,
        lora_targets: tuple[str, ...] | None = None,
        widths: tuple[int, ...] = (512, 1024, 2048),
        batch: int = 1,
        **how: Any,
    ) -> ProbeSpec:
        """The probe of the run these flags describe: `lora_targets` module paths inside a layer (None:
        all-linear); `how`: the rest of `ProbeSetup`'s fields (device, dtype, repeats, budget, ...)."""
        from tuneproof.attention.paths import names
        from tuneproof.core import validate

        validate.integers("widths", widths, low=2)
        validate.choice("attn", attn, names(probe=True))  # the paths a probe can run
        run = Run.of_flags(
            attn=attn, mode=mode, seq_len=max(widths), micro_batch=batch, grad_ckpt=grad_ckpt,
            lora_r=lora_rank, targets=tuple(lora_targets) if lora_targets else ("all-linear",),
        )  # fmt: skip
        return cls(model=model, out=out, probe=ProbeSetup(run=run, widths=widths, batch=batch, **how))


@dataclass(kw_only=True, frozen=True, slots=True)
class ProbePlan:
    """A probe that passed every cheap check (`prepare`): the model, the probe, the output folder."""

    model: ResolvedModel
    spec: ProbeSetup
    out: Path | None = None


def prepare(spec: ProbeSpec) -> ProbePlan:
    """Everything refused before a model is built: the output folder (`OUT_FILES` writable), then
    positions, the device and memory (`check_probe`)."""
    from tuneproof.arch import resolve
    from tuneproof.core.io import check_out_folder

    if spec.out is not None:
        check_out_folder(spec.out, engine.OUT_FILES)
    model = resolve(spec.model)
    engine.check_probe(model, spec.probe)
    return ProbePlan(model=model, spec=spec.probe, out=spec.out)


def run(
    plan: ProbePlan,
    progress: Progress | None = None,
    notice: Callable[[str], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> ProbeResult:
    """Time, fit, profile and cross-check. Widths that run out of memory are skipped and reported.

    The measuring half (a real model, `model_steps`, the timing harness, the profiler) feeds the
    analysing half (`analyse`), which is a plain function of the measurements. The whole run counts
    against `spec.budget_s` on `clock` (default: the timing harness's); `notice` gets the estimate made
    after the first timed round, before the other rounds run."""
    from tuneproof.measure.timing import default_clock

    model, spec, out = plan.model, plan.spec, plan.out
    clock = clock or default_clock
    budget = engine.WholeBudget(
        budget_s=spec.budget_s,
        clock=clock,
        started=clock(),
        profiles=spec.profiles,
        over_budget=spec.over_budget,
        max_rounds=spec.max_repeats,
        notice=notice,
    )
    said = None if progress is None else _past_budget(progress, budget, notice)
    steps, timing = engine.time_widths(model, spec, said, budget=budget)
    with tempfile.TemporaryDirectory() as tmp:
        keep = Path(tmp) / "trace.json"
        widths = sorted(timing.timings)
        kernel_ms, set_aside, first_table = engine.profile_widths(
            {w: steps[w] for w in widths}, spec, Path(tmp), keep, said, budget
        )
        if said:
            said("peak")
        result = analyse(model, spec, timing, kernel_ms, set_aside, first_table, engine.probe_peak(spec))
        timing.notes.extend([*budget.lines, budget.finish()])
        if out is not None:
            result.files.update(engine.keep_files(out, keep, timing, kernel_ms))
    if out is not None:
        from tuneproof.core.io import atomic_write_json

        result.files["json"] = str(out / "probe.json")
        atomic_write_json(out / "probe.json", result.to_dict())
    return result


def _past_budget(
    progress: Progress, budget: engine.WholeBudget, notice: Callable[[str], None] | None
) -> Callable[[str], None]:
    """`progress` whose lines, once the budget is spent, say by how much and what is left; the first
    such line also goes to `notice`, which a terminal keeps (a spinner's lines pass)."""
    told = [False]

    def said(text: str) -> None:
        status = budget.status()
        if status and budget.estimate is not None and not told[0] and notice is not None:
            told[0] = True
            notice(f"{status[2:-1]} (at {text})")
        progress(text + status)

    return said
