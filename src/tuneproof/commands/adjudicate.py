"""Numerics against ground truth: each attention backend in low precision vs fp32 math.

Backend-vs-backend differences cannot say which one is right (docs/reference-run.md section 5); each is
measured against the same model in fp32 with SDPA's math backend. The truth uses the very weights the
low-precision runs use (rounded to the low dtype, then held in fp32), so the distances measure the
computation, not the weight rounding.

Criterion (stated in every result): per random batch, the mean absolute error against the truth of
the logits (every batch x width x vocab value), or of the gradients (every parameter element, where
the backend has a backward here), or of the loss; `samples` random batches per width. The closest
backend has the smallest mean error over the batches. Two backends are tied when their paired
difference (same batches) is inside its own spread: the difference's 95 % t-interval over the batches
contains 0. One batch gives no spread, so no verdict.

`tuneproof adjudicate` is `prepare(spec)` (every check before a model is built) then
`run(plan, progress)`: an `Adjudication`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneproof.arch import ResolvedModel, resolve
from tuneproof.attention.paths import names as path_names
from tuneproof.attention.paths import path
from tuneproof.core import validate
from tuneproof.core.deadline import Deadline
from tuneproof.core.dtypes import LOW_PRECISION, torch_dtype
from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress
from tuneproof.core.quantiles import t_quantile
from tuneproof.core.verdict import NoWarnings

if TYPE_CHECKING:
    from rich.console import Console


CRITERIA = {
    "logits": "mean |logit - fp32 truth| over every batch x width x vocab logit",
    "grads": "mean |gradient - fp32 truth| over every parameter element",
    "loss": "|loss - fp32 truth loss|",
}
GRADS = ("auto", "on", "off")


@dataclass(frozen=True, slots=True)
class Diff:
    """max and mean absolute difference of two tensors (or tensor collections), in fp32."""

    max_abs: float
    mean_abs: float

    @classmethod
    def of(cls, got: Any, want: Any) -> Diff:
        d = (got.float() - want.float()).abs()
        return cls(float(d.max()), float(d.mean()))

    @classmethod
    def of_many(cls, got: dict[str, Any], want: dict[str, Any]) -> Diff:
        total, count, worst = 0.0, 0, 0.0
        for name, w in want.items():
            d = (got[name].float() - w.float()).abs()
            total += float(d.sum())
            count += d.numel()
            worst = max(worst, float(d.max()))
        return cls(worst, total / max(count, 1))


@dataclass(kw_only=True, slots=True)
class BackendResult:
    """One backend at one width on one random batch."""

    backend: str
    width: int
    sample: int
    loss_diff: float
    logits: Diff
    grads: Diff | None
    grads_note: str | None = None

    def error(self, criterion: str) -> float | None:
        """The criterion's error, or None where it cannot be measured (no backward here)."""
        if criterion == "logits":
            return self.logits.mean_abs
        if criterion == "grads":
            return None if self.grads is None else self.grads.mean_abs
        return self.loss_diff

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "width": self.width,
            "sample": self.sample,
            "loss_diff": self.loss_diff,
            "logits": {"max_abs": self.logits.max_abs, "mean_abs": self.logits.mean_abs},
            "grads": None
            if self.grads is None
            else {"max_abs": self.grads.max_abs, "mean_abs": self.grads.mean_abs},
            "grads_note": self.grads_note,
        }


@dataclass(kw_only=True, frozen=True, slots=True)
class WidthVerdict:
    """Which backend is closest to the truth at one width, and what that rests on.

    `outcome`: "closest" (one backend beats every other beyond the noise), "tied" (`choice` is the
    smallest mean error but `tied` are inside its noise), or "inconclusive" (no spread: one batch, or
    no backend measurable on the criterion). `margin` is the runner-up's mean error minus the best's;
    `noise` the half-width of the paired difference's 95 % interval."""

    width: int
    outcome: str
    choice: str | None
    tied: tuple[str, ...]
    margin: float | None
    noise: float | None
    errors: dict[str, float]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "outcome": self.outcome,
            "choice": self.choice,
            "tied": list(self.tied),
            "margin": self.margin,
            "noise": self.noise,
            "mean_error": self.errors,
            "reason": self.reason,
        }


def paired_halfwidth(diffs: list[float]) -> float | None:
    """Half-width of the 95 % t-interval of the mean of paired differences, or None with one value."""
    n = len(diffs)
    if n < 2:
        return None
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    return t_quantile(n - 1) * sd / math.sqrt(n)


def judge_width(width: int, errors: dict[str, list[float]]) -> WidthVerdict:
    """`errors[backend]` lists the criterion's error per batch (same batches for every backend)."""
    means = {b: sum(e) / len(e) for b, e in errors.items() if e}
    if not means:
        return WidthVerdict(
            width=width,
            outcome="inconclusive",
            choice=None,
            tied=(),
            margin=None,
            noise=None,
            errors={},
            reason="no backend is measurable on this criterion",
        )
    ranked = sorted(means, key=lambda b: means[b])
    best = ranked[0]
    if len(ranked) == 1:
        return WidthVerdict(
            width=width,
            outcome="inconclusive",
            choice=best,
            tied=(),
            margin=None,
            noise=None,
            errors=means,
            reason="only one backend measured",
        )
    runner = ranked[1]
    margin = means[runner] - means[best]
    noise = paired_halfwidth([r - b for r, b in zip(errors[runner], errors[best], strict=True)])
    if noise is None:
        return WidthVerdict(
            width=width,
            outcome="inconclusive",
            choice=best,
            tied=(),
            margin=margin,
            noise=None,
            errors=means,
            reason=f"{best} has the smallest error, but one batch gives no spread: use 2 or more samples",
        )
    tied = []
    for other in ranked[1:]:
        d = [o - b for o, b in zip(errors[other], errors[best], strict=True)]
        half = paired_halfwidth(d)
        if half is not None and abs(sum(d) / len(d)) <= half:
            tied.append(other)
    if tied:
        return WidthVerdict(
            width=width,
            outcome="tied",
            choice=best,
            tied=tuple(tied),
            margin=margin,
            noise=noise,
            errors=means,
            reason=f"{best} and {', '.join(tied)} are tied: their paired difference is inside its own 95 % "
            "interval",
        )
    return WidthVerdict(
        width=width,
        outcome="closest",
        choice=best,
        tied=(),
        margin=margin,
        noise=noise,
        errors=means,
        reason=f"{best} is closest: {margin:.3g} below {runner}, beyond the paired noise of +-{noise:.3g}",
    )


@dataclass(kw_only=True, slots=True)
class Adjudication(NoWarnings):
    dtype: str
    device: str
    criterion: str
    samples: int
    results: list[BackendResult]
    notes: list[str] = field(default_factory=list)
    cut: str | None = None  # what the budget left out, when it stopped the run

    @property
    def widths(self) -> list[int]:
        return sorted({r.width for r in self.results})

    def judge(self, width: int) -> WidthVerdict:
        errors: dict[str, list[float]] = {}
        for r in self.results:
            if r.width == width:
                e = r.error(self.criterion)
                errors.setdefault(r.backend, [])
                if e is not None:
                    errors[r.backend].append(e)
        measured = len({r.sample for r in self.results if r.width == width})  # fewer when the budget cut
        return judge_width(width, {b: e for b, e in errors.items() if len(e) == measured})

    def verdicts(self) -> dict[int, WidthVerdict]:
        return {w: self.judge(w) for w in self.widths}

    @property
    def verdict(self) -> None:
        return None  # one verdict per width (`verdicts`), none for the run: the command exits 0

    def render(self, console: Any) -> None:

        render_adjudication(self, console)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "device": self.device,
            "truth": "fp32, SDPA math backend, same (rounded) weights",
            "criterion": self.criterion,
            "criterion_definition": CRITERIA[self.criterion],
            "samples": self.samples,
            "results": [r.to_dict() for r in self.results],
            "verdicts": {str(w): v.to_dict() for w, v in self.verdicts().items()},
            "notes": self.notes,
            "cut_by_budget": self.cut,
        }


@dataclass(kw_only=True, frozen=True, slots=True)
class AdjudicateSpec:
    model: str | Path | ResolvedModel = "tiny"  # a config read by `prepare`, or a model already resolved
    widths: tuple[int, ...] = (256, 1024)
    backends: tuple[str, ...] = ("sdpa", "flex_attention", "eager")
    dtype: str = "bf16"
    grads: str = "auto"
    criterion: str = "logits"
    batch: int = 1
    samples: int = 3
    device: str = "cpu"
    seed: int = 0
    budget_s: float = 600.0  # the whole run; batches that would end past it are not started
    budget_from_start: bool = False  # count the budget from the process's start (the command line)

    def __post_init__(self) -> None:
        validate.integers("widths", self.widths, low=2)
        validate.real("budget_s", self.budget_s, low=0.0, low_open=True, high=86_400.0, hint="seconds")
        if not self.backends:
            raise TuneproofError(
                "{backends} is empty", "give one or more attention paths", fields=("backends",)
            )
        for b in self.backends:
            validate.choice("backends", b, path_names(adjudicate=True))
        validate.choice("dtype", self.dtype, LOW_PRECISION)
        validate.choice("grads", self.grads, GRADS)
        validate.choice("criterion", self.criterion, CRITERIA)
        validate.integer("batch", self.batch, high=1024)
        validate.integer("samples", self.samples, high=1000)
        validate.choice("device", self.device, ("cpu", "cuda"))
        validate.integer("seed", self.seed, low=0, high=2**63 - 1)
        if self.criterion == "grads" and self.grads == "off":
            raise TuneproofError(
                "{criterion} grads with {grads} off",
                "turn gradients on or judge logits",
                fields=("criterion", "grads"),
            )
        for b in self.forward_only():
            if self.grads == "on":
                raise TuneproofError(
                    f"backward requested for {b} on CPU: PyTorch has no {b} backward on CPU",
                    f"use grads auto (forward only for {b}) or a CUDA device",
                )

    def forward_only(self) -> tuple[str, ...]:
        """The backends without a backward on this device (the path table's `backward_on_cpu`)."""
        if self.device != "cpu":
            return ()
        return tuple(b for b in self.backends if not path(b).backward_on_cpu)


def _run(model: Any, ids: Any, backward: bool) -> tuple[float, Any, dict[str, Any] | None]:
    import torch

    model.zero_grad(set_to_none=True)
    if backward:
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        grads = {
            n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None
        }
        return float(out.loss.detach()), out.logits.detach().float(), grads
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
    return float(out.loss), out.logits.float(), None


@dataclass(frozen=True, slots=True)
class AdjudicatePlan:
    """A checked spec on a model: every width placeable, every backend buildable here."""

    model: ResolvedModel
    spec: AdjudicateSpec


def prepare(spec: AdjudicateSpec) -> AdjudicatePlan:
    """Every check before a model is built: widths within the model's positions, flex importable,
    the device present, and (on the CPU) memory for each backend's widest step."""
    import torch

    model = resolve(spec.model)

    from tuneproof.measure.model import check_fits_on_cpu, check_positions

    check_positions(model, spec.widths)
    if "flex_attention" in spec.backends:
        from tuneproof.attention.flex import require_flex

        require_flex()
    if spec.device == "cuda" and not torch.cuda.is_available():
        raise TuneproofError("{device} cuda but torch sees no CUDA device", "use cpu", fields=("device",))
    if spec.device == "cpu":
        for b in spec.backends:
            check_fits_on_cpu(
                model, attn=b, batch=spec.batch, width=max(spec.widths), training=spec.grads != "off"
            )
    return AdjudicatePlan(model, spec)


def run(
    plan: AdjudicatePlan, progress: Progress | None = None, clock: Callable[[], float] | None = None
) -> Adjudication:
    """Run each backend at each width on `samples` random batches in `dtype` and measure its distance to
    fp32 math truth on the same batches. The whole run counts against `spec.budget_s` (on `clock`): a
    batch that would end past it is not started (the first always runs), and the cut is said."""
    import torch

    from tuneproof.measure.model import build_model

    model, spec = plan.model, plan.spec
    if clock is not None:
        deadline = Deadline(budget_s=spec.budget_s, clock=clock, unit="batch")
    elif spec.budget_from_start:
        deadline = Deadline.from_command_start(spec.budget_s, unit="batch")
    else:
        deadline = Deadline(budget_s=spec.budget_s, unit="batch")
    if progress:  # the floor: the models and one batch of every backend, which always run
        progress(
            "building models (the first batch of every backend always runs, later ones inside the budget)"
        )
    low = torch_dtype(spec.dtype)
    reference = build_model(model, "sdpa", device=spec.device, dtype="fp32", seed=spec.seed)
    state = {k: v.to(low).to(torch.float32) for k, v in reference.state_dict().items()}
    reference.load_state_dict(state)
    gen = torch.Generator().manual_seed(spec.seed + 1)
    results: list[BackendResult] = []
    models = {}
    for b in spec.backends:
        m = build_model(model, b, device=spec.device, dtype="fp32", seed=spec.seed)
        m.load_state_dict(state)
        models[b] = m.to(low)
    taken: dict[int, float] = {}  # seconds of one batch (every backend and the truth) per width
    for width in spec.widths:
        for sample in range(spec.samples):
            if results and not deadline.fits(_batch_guess(taken, width)):
                deadline.stop(_left_out(spec, width, sample))
                break
            where = f"width {width}: batch {sample + 1} of {spec.samples}"
            if progress:
                progress(where + deadline.status())
            ids = torch.randint(0, int(model.config.vocab_size), (spec.batch, width), generator=gen)
            started = deadline.clock()
            said = (
                None if progress is None else (lambda b, w=where: progress(f"{w}: {b}" + deadline.status()))
            )
            results.extend(_one_batch(spec, reference, models, ids.to(spec.device), width, sample, said))
            taken[width] = deadline.clock() - started
        if deadline.cut:
            break
    notes = _notes(spec, results) + ([deadline.cut] if deadline.cut else [])
    return Adjudication(
        dtype=spec.dtype,
        device=spec.device,
        criterion=spec.criterion,
        samples=spec.samples,
        results=results,
        notes=notes,
        cut=deadline.cut,
    )


def _one_batch(
    spec: AdjudicateSpec,
    reference: Any,
    models: dict[str, Any],
    ids: Any,
    width: int,
    sample: int,
    said: Callable[[str], None] | None = None,
) -> list[BackendResult]:
    """Every backend on one batch, against the fp32 math truth on the same batch; `said` hears each
    model as it starts (a batch is never cut: every backend is judged on the same batches)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    want_grads = spec.grads != "off"
    if said:
        said("fp32 truth")
    with sdpa_kernel(SDPBackend.MATH):
        t_loss, t_logits, t_grads = _run(reference, ids, backward=want_grads)
    out = []
    for b in spec.backends:
        if said:
            said(b)
        no_bwd = b in spec.forward_only()
        loss, logits, g = _run(models[b], ids, backward=want_grads and not no_bwd)
        note = f"forward only: {b} has no backward on CPU" if (no_bwd and want_grads) else None
        gd = Diff.of_many(g, t_grads) if g is not None and t_grads is not None else None
        out.append(
            BackendResult(
                backend=b,
                width=width,
                sample=sample,
                loss_diff=abs(loss - t_loss),
                logits=Diff.of(logits, t_logits),
                grads=gd,
                grads_note=note,
            )
        )
    return out


def _batch_guess(taken: dict[int, float], width: int) -> float:
    """Seconds one batch at `width` should take: its last one, or a narrower width's scaled by the
    square of the widths (attention's share grows so); 0 before any batch ran."""
    if width in taken:
        return taken[width]
    return max((t * (width / w) ** 2 for w, t in taken.items()), default=0.0)


def _left_out(spec: AdjudicateSpec, width: int, sample: int) -> str:
    later = spec.widths[spec.widths.index(width) + 1 :]
    parts = [f"width {width}'s batches {sample + 1} to {spec.samples}" if sample else f"width {width}"]
    parts += [f"width {w}" for w in later]
    return ", ".join(parts)


def _notes(spec: AdjudicateSpec, results: list[BackendResult]) -> list[str]:
    notes = [f"criterion: {CRITERIA[spec.criterion]}, over {spec.samples} random batch(es) per width"]
    for b in dict.fromkeys(r.backend for r in results if r.grads_note):
        notes.append(f"{b} is adjudicated on the forward only here: PyTorch has no {b} backward on CPU")
        if spec.criterion == "grads":
            notes.append(f"{b} has no gradients here, so it takes no part in the grads verdict")
    return notes


def render_adjudication(result: Adjudication, console: Console) -> None:
    from rich.markup import escape

    from tuneproof.core.tables import Table

    t = Table(title=f"distance to fp32 math truth ({result.dtype} on {result.device}; same rounded weights)")
    for col in (
        "width",
        "backend",
        "batch",
        "|loss diff|",
        "logits max",
        "logits mean",
        "grads max",
        "grads mean",
    ):
        t.add_column(col, justify="left" if col == "backend" else "right")
    for r in result.results:
        g = r.grads
        t.add_row(
            str(r.width),
            r.backend,
            str(r.sample),
            f"{r.loss_diff:.3e}",
            f"{r.logits.max_abs:.3e}",
            f"{r.logits.mean_abs:.3e}",
            f"{g.max_abs:.3e}" if g else "-",
            f"{g.mean_abs:.3e}" if g else "-",
        )
    console.print(t)
    for w, v in result.verdicts().items():
        console.print(f"width {w}: {v.outcome}: {escape(v.reason)}")
    for n in result.notes:
        console.print(f"note: {escape(n)}")
