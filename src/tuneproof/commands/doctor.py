"""`tuneproof doctor`: runs every diagnosis on one model and assembles one report.

Sections so far: the FLOP ledger (intended vs performed) at several widths, the attention dispatch
chain (live here, predicted for the reference run's sm_120 card), batching choices on the shipped long-tail
length set, and the measurement probe (scaling fit, kernel table, cross-check) on the CPU. Later
capabilities (gates, shipping) add their sections here.

`tuneproof doctor` is a `DoctorSpec` (the model, probe budget, where to write), `prepare(spec)` (the
folders checked before any work) and `run(plan, progress)`: a `DoctorReport`, written to report.json
(`--out`) and a report folder with plots drawn from the section results (`--report`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneproof.core import validate
from tuneproof.core.progress import Progress
from tuneproof.core.verdict import NoWarnings

if TYPE_CHECKING:
    from rich.console import Console

    from tuneproof.arch import ResolvedModel
    from tuneproof.arch.shape import ModelShape
    from tuneproof.core.report import Plot
    from tuneproof.flops.report import FlopReport

# The story of docs/reference-run.md told on a small model: a padded SDPA run, the same run bucketed
# (no padding), and bucketed under flex_attention. LoRA with activation checkpointing, batch 2.
SCENARIOS: tuple[tuple[str, str, float], ...] = (
    ("sdpa, 30% padding", "sdpa", 0.3),
    ("sdpa, bucketed (0% padding)", "sdpa", 0.0),
    ("flex, bucketed (0% padding)", "flex_attention", 0.0),
)
BATCH = 2
LORA_RANK = 16


def doctor_widths(shape: ModelShape) -> list[int]:
    """Widths below, at and well above the smallest sliding window (or 256/1024/4096 without one)."""
    windows = [layer.attention.window for layer in shape.layers if layer.attention.window]
    w = min(windows) if windows else 1024
    return sorted({max(16, w // 2), w * 2, w * 8})


@dataclass(slots=True)
class FlopsSection:
    widths: list[int]
    rows: list[dict[str, Any]]
    detail: FlopReport

    def to_dict(self) -> dict[str, Any]:
        return {"widths": self.widths, "rows": self.rows, "detail": self.detail.to_dict()}

    def plots(self) -> list[Plot]:
        return [flop_waterfall(self.detail)]

    def render(self, console: Console) -> None:
        from tuneproof.core.tables import Table
        from tuneproof.flops.render import fmt_flops, render_report

        t = Table(title=f"FLOPs per step (LoRA r={LORA_RANK}, grad-ckpt, batch {BATCH})")
        for col in ("width", "scenario", "intended", "performed", "perf/int", "largest excess"):
            t.add_column(
                col, justify="right" if col in ("width", "intended", "performed", "perf/int") else "left"
            )
        for r in self.rows:
            t.add_row(
                str(r["width"]),
                r["scenario"],
                fmt_flops(r["intended"]),
                fmt_flops(r["performed"]),
                f"{r['ratio']:.2f}x",
                r["largest_excess"] or "-",
            )
        console.print(t)
        console.print(f"\n[bold]Full ledger at width {self.detail.run.seq_len}, {SCENARIOS[0][0]}[/bold]")
        render_report(self.detail, console)


@dataclass(slots=True)
class MemorySection:
    """The memory ledger (`tuneproof memory`) of the flops section's runs: the peak per width and
    scenario, with and without checkpointing, where it falls."""

    rows: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows}

    def plots(self) -> list[Plot]:
        return []

    def render(self, console: Console) -> None:
        from tuneproof.core.tables import Table
        from tuneproof.memory.report import gib

        t = Table(title=f"peak memory per step (LoRA r={LORA_RANK}, batch {BATCH}, bf16; tuneproof memory)")
        for col in ("width", "scenario", "grad-ckpt", "peak", "where"):
            t.add_column(col, justify="right" if col in ("width", "peak") else "left")
        for r in self.rows:
            t.add_row(str(r["width"]), r["scenario"], "yes" if r["grad_ckpt"] else "no", gib(r["peak_bytes"]),
                      r["where"])  # fmt: skip
        console.print(t)


def memory_section(model: ResolvedModel) -> MemorySection | SkippedSection:
    from tuneproof.core.errors import TuneproofError
    from tuneproof.memory.norms import norm_inventory
    from tuneproof.memory.step import check_sizable, step_memory

    try:
        check_sizable(model.shape)
    except TuneproofError as e:
        return SkippedSection(f"the memory ledger cannot size this model: {e.message}")
    norms = norm_inventory(model)
    rows = []
    for width in doctor_widths(model.shape):
        for (label, attn, pad), ckpt in ((s, c) for s in SCENARIOS for c in (True, False)):
            run = _lora_run(width, attn, ckpt).step(padding=pad)
            peak = step_memory(model, run, norms=norms).peak
            rows.append({"width": width, "scenario": label, "grad_ckpt": ckpt, "peak_bytes": peak.peak_bytes,
                         "where": peak.where})  # fmt: skip
    return MemorySection(rows)


@dataclass(kw_only=True, slots=True)
class DoctorReport(NoWarnings):
    """Every section's result. `written` lists what `run` wrote (report.json, a report folder), which
    the text names first; `to_dict()` is the report itself (what `--json` prints and report.json holds)."""

    model: str
    sections: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> None:
        return None  # a diagnosis: each section says what it found

    def summary(self) -> list[Any]:
        """The probe's derived numbers (MFU, quadratic shares, the cross-check's gap, the reference run's
        comparison), each with its 95 % interval or the reason it has none; empty without a probe."""
        probe = self.sections.get("probe")
        return list(probe.result.derived) if isinstance(probe, ProbeSection) else []

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "notes": self.notes,
            "sections": {k: v.to_dict() for k, v in self.sections.items()},
            "summary": {k: x for d in self.summary() for k, x in d.to_dict().items()},
        }

    def plots(self) -> list[Plot]:
        """The plots of the sections that ran: the FLOP waterfall, the probe's scaling fit and kernel
        classes, the samplers (in that order)."""
        order = ("flops", "probe", "batching")
        return [p for name in order if name in self.sections for p in self.sections[name].plots()]

    def render(self, console: Console) -> None:
        for line in self.written:
            console.print(line)
        console.rule(f"tuneproof doctor: {self.model}")
        for note in self.notes:
            console.print(f"note: {note}")
        for name, section in self.sections.items():
            console.rule(name)
            section.render(console)
        if summary := self.summary():
            console.rule("summary (95 % intervals from the timed repeats and profiles)")
            from rich.markup import escape

            for d in summary:
                console.print(escape(d.text()))


def flops_section(shape: ModelShape) -> FlopsSection:
    from tuneproof.flops import flop_report

    widths = doctor_widths(shape)
    rows = []
    detail = None
    for width in widths:
        for label, attn, pad in SCENARIOS:
            run = _lora_run(width, attn, True).step(padding=pad)
            rep = flop_report(shape, run)
            top = max(rep.excess, key=lambda e: e.flops, default=None)
            rows.append(
                {
                    "width": width,
                    "scenario": label,
                    "intended": rep.intended.total,
                    "performed": rep.performed.total,
                    "ratio": rep.performed.total / rep.intended.total,
                    "largest_excess": top.name if top else None,
                }
            )
            if width == widths[-1] and detail is None:
                detail = rep
    assert detail is not None
    return FlopsSection(widths, rows, detail)


# The doctor's probe: the forward pass of a batch of 2 at four widths. Four widths leave the fit a
# degree of freedom even with a constant term; the forward keeps the section under a minute on a
# 2-core CPU (a training step there takes about twice as long per round). `tuneproof probe --mode
# full` times the training step.
PROBE_WIDTHS = (512, 1024, 2048, 4096)
PROBE_MODE = "forward"
PROBE_NOTE = (
    "the doctor probes the forward pass at four widths to stay under a minute on a CPU; "
    "probe in full or lora mode for the training step"
)


@dataclass(slots=True)
class ProbeSection:
    result: Any  # ProbeResult
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.result.to_dict(), "note": self.note}

    def plots(self) -> list[Plot]:
        from tuneproof.core.report import probe_plots

        return probe_plots(self.result.to_dict())

    def render(self, console: Console) -> None:
        from tuneproof.measure.render import render_probe

        render_probe(self.result, console)
        console.print(f"note: {self.note}")


@dataclass(slots=True)
class SkippedSection:
    """A section that could not run here, and why: never a placeholder result."""

    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"skipped": self.reason}

    def plots(self) -> list[Plot]:
        return []  # nothing ran: the report says why, never an empty picture

    def render(self, console: Console) -> None:
        console.print(f"skipped: {self.reason}")


def probe_section(
    model: ResolvedModel,
    budget_s: float,
    progress: Progress | None = None,
    notice: Callable[[str], None] | None = None,
) -> ProbeSection | SkippedSection:
    from tuneproof.commands.probe import ProbeSpec, prepare, run
    from tuneproof.core.errors import TuneproofError

    # a diagnosis runs the probe's floor even past its budget, and the probe's notes say so; the
    # estimate is said as soon as it is known, and every progress line past the budget says so
    spec = ProbeSpec.of(
        model=model, widths=PROBE_WIDTHS, batch=2, mode=PROBE_MODE, budget_s=budget_s, over_budget="floor"
    )
    try:
        return ProbeSection(run(prepare(spec), progress, notice=notice or progress), PROBE_NOTE)
    except TuneproofError as e:
        return SkippedSection(f"the probe cannot run this model here: {e.message}")


@dataclass(slots=True)
class ExplainSection:
    """The dispatch chain for the doctor's padded SDPA training run: live on this device, and
    predicted for the reference run's card (sm_120), where the chain ends in the slow path."""

    live: Any  # Explanation
    case_card: Any  # Explanation

    def to_dict(self) -> dict[str, Any]:
        return {"live": self.live.to_dict(), "predicted_sm120": self.case_card.to_dict()}

    def render(self, console: Console) -> None:
        from tuneproof.attention.render import render_explanation

        render_explanation(self.live, console)
        console.print()
        render_explanation(self.case_card, console)


def _lora_run(width: int, attn: str, grad_ckpt: bool) -> Any:
    """The doctor's run at one width: a LoRA of rank LORA_RANK on all-linear, BATCH rows."""
    from tuneproof.runs.run import Run

    return Run.of_flags(
        attn=attn,
        mode="lora",
        seq_len=width,
        micro_batch=BATCH,
        lora_r=LORA_RANK,
        grad_ckpt=grad_ckpt,
        targets=("all-linear",),
    )


def explain_section(shape: ModelShape) -> ExplainSection:
    from dataclasses import replace

    from tuneproof.attention.dispatch import Context, explain
    from tuneproof.hardware.card import of_capability
    from tuneproof.runs.run import Run

    widest = Run.of_flags(attn="sdpa", mode="full", seq_len=doctor_widths(shape)[-1], micro_batch=BATCH)
    here = Context(step=widest.step(padded=True), dtype="fp32")
    return ExplainSection(
        explain(shape, here), explain(shape, replace(here, dtype="bf16", card=of_capability((12, 0))))
    )


@dataclass(kw_only=True, slots=True)
class BucketsSection:
    """Batching choices on the shipped synthetic long-tail set (20,000 lengths, ~5 per root)."""

    results: list[Any]  # SamplerResult
    sweep: list[dict[str, Any]]
    num_lengths: int
    widths: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "samplers": {r.name: r.to_dict() for r in self.results},
            "sweep": self.sweep,
            "num_lengths": self.num_lengths,
            "distinct_widths": self.widths,
        }

    def plots(self) -> list[Plot]:
        from tuneproof.core.report import sampler_plot

        return [sampler_plot({r.name: r.to_dict() for r in self.results}, None, "the doctor's length set")]

    def render(self, console: Console) -> None:
        from tuneproof.commands.buckets import render_buckets

        render_buckets(self.results, self.sweep, self.num_lengths, BATCH, GRAD_ACCUM, "sdpa", console)
        console.print(
            f"bucketed plan: {self.widths['exact']} distinct widths, {self.widths['multiple_of_64']} when "
            "padded to a multiple of 64: size flex's RecompileGuard with them"
        )


GRAD_ACCUM = 16


def buckets_section(shape: ModelShape) -> BucketsSection:
    from tuneproof.data import BucketBatchSampler, synthetic_lengths
    from tuneproof.data.compare import compare

    lengths, roots = synthetic_lengths()
    results, sweep = compare(lengths, roots, BATCH, GRAD_ACCUM, sweep=(1, 16, 256), shape=shape, attn="sdpa")
    sampler = BucketBatchSampler(lengths, BATCH, GRAD_ACCUM)
    widths = {"exact": len(sampler.widths()), "multiple_of_64": len(sampler.widths(64))}
    return BucketsSection(results=results, sweep=sweep, num_lengths=int(lengths.size), widths=widths)


@dataclass(slots=True)
class ProjectionSection:
    """The shipped length set's whole run projected from the probe's fit (`tuneproof plan`): ours
    against a random sampler, micro-batch 2, grad-accum 16, one rank. The probe times the forward
    pass, so this is forward time on this device: the ratio carries over, the hours do not."""

    projections: list[Any]  # Projection
    model: Any  # StepModel

    def line(self) -> str:
        from tuneproof.measure.projection import hours as _h

        ours, rnd = self.projections
        ci = (f" (95 % interval {_h(ours.wall_s_ci95[0])}-{_h(ours.wall_s_ci95[1])})"
              if ours.wall_s_ci95 else f" (no interval: {self.model.no_interval})")  # fmt: skip
        return (
            f"projection, forward pass on this device: ours {_h(ours.wall_s)}{ci}, random {_h(rnd.wall_s)} "
            f"({rnd.wall_s / ours.wall_s:.2f}x); {100 * ours.extrapolated_share:.0f} % of ours is at widths "
            f"beyond the probed {self.model.measured[0]}-{self.model.measured[1]} (extrapolated)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "samplers": {p.sampler: p.to_dict() for p in self.projections},
            "step_cost": {"A": self.model.cost.a, "B": self.model.cost.b, "C": self.model.cost.c,
                          "batch": self.model.cost.batch, "source": self.model.source},
            "line": self.line(),
        }  # fmt: skip

    def render(self, console: Console) -> None:
        console.print(self.line())


def projection_section(probe: Any) -> ProjectionSection | SkippedSection:
    from tuneproof.data import synthetic_lengths
    from tuneproof.measure.probe import timing_rows
    from tuneproof.measure.projection import project
    from tuneproof.measure.step_model import StepModel

    if not isinstance(probe, ProbeSection):
        return SkippedSection("no probe fit to project with (the probe section says why)")
    ws, ts = timing_rows(probe.result.timing)
    model = StepModel.from_points(ws, ts, probe.result.spec.batch, source="the doctor's probe (forward pass)")
    lengths, _ = synthetic_lengths()
    return ProjectionSection(project(lengths, BATCH, GRAD_ACCUM, model, samplers=("ours", "random")), model)


def _diagnose(
    model: ResolvedModel,
    probe_budget_s: float = 30.0,
    progress: Progress | None = None,
    notice: Callable[[str], None] | None = None,
) -> DoctorReport:
    """Every diagnosis on `model` (see `tuneproof.arch.resolve`); the probe times for at most
    `probe_budget_s` seconds, or its stated floor (`notice` gets the estimate and the budget's end)."""
    report = DoctorReport(model=model.name, notes=list(model.notes))
    if progress:
        progress("FLOP ledger")
    report.sections["flops"] = flops_section(model.shape)
    if problem := model.positions_problem(doctor_widths(model.shape)[-1], "the widest FLOP width"):
        report.notes.append(f"{problem}: the ledger counts it as asked")
    if progress:
        progress("memory ledger")
    report.sections["memory"] = memory_section(model)
    if progress:
        progress("attention dispatch")
    report.sections["attention dispatch"] = explain_section(model.shape)
    if progress:
        progress("batching")
    report.sections["batching"] = buckets_section(model.shape)
    report.sections["probe"] = probe_section(model, probe_budget_s, progress, notice)
    if progress:
        progress("projection")
    report.sections["projection"] = projection_section(report.sections["probe"])
    return report


@dataclass(kw_only=True, frozen=True, slots=True)
class DoctorSpec:
    """A doctor run: seconds of probe timing, and where the report goes: `out` (a folder that receives
    report.json) and `report_dir` (report.md, report.json and the plots); None writes nothing."""

    model: str | Path | ResolvedModel = "tiny"  # a config read by `prepare`, or a model already resolved
    probe_budget_s: float = 30.0
    out: Path | None = None
    report_dir: Path | None = None

    def __post_init__(self) -> None:
        validate.real("probe_budget_s", self.probe_budget_s, low=0.0, low_open=True, high=86_400.0)


@dataclass(frozen=True, slots=True)
class DoctorPlan:
    model: ResolvedModel
    spec: DoctorSpec


def prepare(spec: DoctorSpec) -> DoctorPlan:
    """Refuse folders that cannot be written before an hour of work is lost to them."""
    from tuneproof.arch import resolve
    from tuneproof.core.report import check_json_folder, check_report_folder

    if spec.out is not None:
        check_json_folder(spec.out)
    if spec.report_dir is not None:
        check_report_folder(spec.report_dir)
    return DoctorPlan(resolve(spec.model), spec)


TITLE = "tuneproof doctor"  # report.json's title, with --out or --report alike


def run(
    plan: DoctorPlan, progress: Progress | None = None, notice: Callable[[str], None] | None = None
) -> DoctorReport:
    """`_diagnose`, then the report written where the spec says; `notice` gets the lines a user should
    see as they come (the probe's estimate against its budget), which a spinner would pass over."""
    from tuneproof.core.report import write_json, write_report

    spec = plan.spec
    report = _diagnose(plan.model, spec.probe_budget_s, progress, notice)
    if spec.out is not None:
        report.written.append(f"report written to {write_json(spec.out, TITLE, report.to_dict())}")
    if spec.report_dir is not None:
        summary = [
            f"Model: {plan.model.name}.",
            "Every number below is in report.json; every plot's series too.",
            *(d.text() + "." for d in report.summary()),
        ]
        write_report(spec.report_dir, TITLE, report.to_dict(), report.plots(), summary)
        report.written.append(f"report (markdown, JSON, plots) written to {spec.report_dir}")
    return report


def flop_waterfall(report: FlopReport) -> Plot:
    """Intended, each named excess, performed: the ledger of one micro-batch."""
    from tuneproof.core.report import waterfall

    excess = [(e.name, e.flops) for e in report.excess]
    totals = (report.intended.total, report.performed.total)
    return waterfall(totals, excess, report.run.attn, report.run.seq_len)
