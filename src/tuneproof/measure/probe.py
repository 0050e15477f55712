"""`tuneproof probe`: time a real training step at several widths, fit t = A*w + B*w^2, profile every
width, and cross-check the fit's quadratic share against the attention kernels' (like with like).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tuneproof import validate
from tuneproof.arch import ResolvedModel
from tuneproof.attention.paths import names as path_names
from tuneproof.errors import TuneproofError
from tuneproof.measure.crosscheck import CrossCheck, cross_check
from tuneproof.measure.fit import MIN_SPAN, MIN_WIDTHS, ScalingFit, fit_scaling
from tuneproof.measure.kernels import CLASSES, PROFILE_COLUMNS, KernelTable, kernel_table, load_trace
from tuneproof.measure.timing import Interleaved, Skip, Timing, time_interleaved

DEVICES = ("cpu", "cuda")
DTYPES = ("fp32", "bf16", "fp16")
MODES = ("forward", "full", "lora")


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    """What to probe and how hard to measure.

    `min_repeats`/`max_repeats`/`budget_s`/`target`: timing rounds continue until every width's median
    is known to +-target (needs `min_repeats`), up to `max_repeats` rounds or `budget_s` seconds of
    timing. `profiles`: profiled steps per width (2 or more give the kernel side an interval)."""

    attn: str = "sdpa"
    widths: tuple[int, ...] = (512, 1024, 2048)
    batch: int = 1
    mode: str = "full"
    grad_ckpt: bool = False
    device: str = "cpu"
    dtype: str | None = None  # None: fp32 on CPU, bf16 on CUDA
    lora_rank: int = 16
    min_repeats: int = 6
    max_repeats: int = 30
    budget_s: float = 60.0
    target: float = 0.05
    profiles: int = 3
    seed: int = 0

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
        validate.choice("mode", self.mode, MODES)
        validate.choice("device", self.device, DEVICES)
        if self.dtype is not None:
            validate.choice("dtype", self.dtype, DTYPES)
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
        validate.real("budget_s", self.budget_s, low=0.0, low_open=True, hint="seconds of timing")
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
        if self.attn == "flex_attention" and self.device == "cpu" and self.mode != "forward":
            raise TuneproofError(
                "flex_attention has no backward on CPU (PyTorch raises NotImplementedError)",
                "use mode forward, another attention path, or a CUDA device",
            )
        if self.grad_ckpt and self.mode == "forward":
            raise TuneproofError(
                "{grad_ckpt} needs a backward pass", "use mode full or lora", fields=("grad_ckpt",)
            )

    @property
    def torch_dtype(self) -> str:
        return self.dtype or ("bf16" if self.device == "cuda" else "fp32")


@dataclass(slots=True)
class ProbeResult:
    model: str
    spec: ProbeSpec
    timing: Interleaved[int]
    fit: ScalingFit
    kernel_ms: dict[int, list[dict[str, float]]]  # width -> per profile, ms per kernel class
    kernels: KernelTable  # the largest width's first profile, for its top kernels
    cross: CrossCheck
    flops: Any  # FlopReport at the profiled width
    peak: Any  # hardware.Peak used for MFU
    files: dict[str, str] = field(default_factory=dict)

    @property
    def timings(self) -> dict[int, Timing]:
        return self.timing.timings

    @property
    def skipped(self) -> dict[int, str]:
        return self.timing.skipped

    @property
    def profiled_width(self) -> int:
        return self.cross.width

    @property
    def verdict(self) -> str:
        return self.cross.verdict.outcome

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "spec": {k: getattr(self.spec, k) for k in self.spec.__dataclass_fields__},
            "timing": self.timing.to_dict(),
            "points": [{"width": w, **t.to_dict()} for w, t in sorted(self.timings.items())],
            "skipped": [{"width": w, "reason": r} for w, r in sorted(self.skipped.items())],
            "fit": self.fit.to_dict(),
            "kernel_ms": {str(w): rows for w, rows in sorted(self.kernel_ms.items())},
            "kernels": self.kernels.to_dict(),
            "cross_check": self.cross.to_dict(),
            "flops": self.flops.to_dict(),
            "files": self.files,
        }


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


def _is_oom(e: BaseException) -> bool:
    """MemoryError, CUDA's "out of memory", or the CPU allocator's "can't allocate memory"."""
    text = str(e).lower()
    return isinstance(e, MemoryError) or "out of memory" in text or "can't allocate memory" in text


def check_probe(model: ResolvedModel, spec: ProbeSpec) -> None:
    """Everything that can be refused before building the model: positions, device, memory."""
    from tuneproof.extras import require
    from tuneproof.model import check_fits_on_cpu, check_positions

    check_positions(model, spec.widths)
    if spec.mode == "lora":
        require("train", "a LoRA probe ({mode} lora)", ("peft",))
    if spec.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise TuneproofError("{device} cuda but torch sees no CUDA device", "use cpu", fields=("device",))
    else:
        check_fits_on_cpu(
            model, attn=spec.attn, batch=spec.batch, width=max(spec.widths), training=spec.mode != "forward"
        )


def run_probe(
    model: ResolvedModel,
    spec: ProbeSpec,
    out: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> ProbeResult:
    """Time, fit, profile and cross-check. Widths that run out of memory are skipped and reported.

    The measuring half (a real model, `model_steps`, the timing harness, the profiler) feeds the
    analysing half (`analyse`), which is a plain function of the measurements."""
    from tuneproof.io import check_out_folder

    check_probe(model, spec)
    if out is not None:
        check_out_folder(out, OUT_FILES)
    steps, timing = time_widths(model, spec, progress)
    with tempfile.TemporaryDirectory() as tmp:
        keep = Path(tmp) / "trace.json"
        widths = sorted(timing.timings)
        kernel_ms, set_aside, first_table = _profile_widths(
            {w: steps[w] for w in widths}, spec, Path(tmp), keep, progress
        )
        if progress:
            progress("peak")
        result = analyse(model, spec, timing, kernel_ms, set_aside, first_table, probe_peak(spec))
        if out is not None:
            result.files.update(_keep(out, keep, timing, kernel_ms))
    if out is not None:
        from tuneproof.io import atomic_write_json

        result.files["json"] = str(out / "probe.json")
        atomic_write_json(out / "probe.json", result.to_dict())
    return result


def time_widths(
    model: ResolvedModel, spec: ProbeSpec, progress: Callable[[str], None] | None = None, net: Any = None
) -> tuple[dict[int, Callable[[], None]], Interleaved[int]]:
    """The timing half of the probe: (each width's step, the interleaved timing rounds), on `net` (a
    `probe_model`) or a model built here. Widths that run out of memory are skipped; fewer than three
    left is an error naming why."""
    steps = model_steps(model, spec) if net is None else width_steps(net, spec, int(model.config.vocab_size))
    timing = time_interleaved(
        steps,
        warmup=1,
        min_repeats=spec.min_repeats,
        max_repeats=spec.max_repeats,
        budget_s=spec.budget_s,
        target=spec.target,
        progress=progress,
    )
    if len(timing.timings) < MIN_WIDTHS:
        raise TuneproofError(
            f"only {len(timing.timings)} width(s) ran ("
            + ", ".join(f"{w}: {r}" for w, r in timing.skipped.items())
            + ")",
            "use smaller widths or batch",
        )
    return steps, timing


def model_steps(model: ResolvedModel, spec: ProbeSpec) -> dict[int, Callable[[], None]]:
    """One training (or forward) step per width on `model` built with random weights; a step that
    runs out of memory raises `Skip` so that its width is dropped with the reason."""
    return width_steps(probe_model(model, spec), spec, int(model.config.vocab_size))


def trainer_overhead(
    net: Any, spec: ProbeSpec, vocab: int, bare: Callable[[], None], steps: int = 14
) -> tuple[float, float]:
    """What a transformers Trainer step adds beyond its bare micro-batch (collator, gradient clipping,
    AdamW, the scheduler, zero_grad, the Trainer's bookkeeping): the median whole Trainer step on
    micro-batches of the narrowest width (after two warm-up steps), minus the median of `bare` (that
    width's bare step) timed right after, so that a load on the machine hits both alike. Returns
    (overhead seconds, floored at 0; the bare step's median)."""
    import tempfile
    import time

    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from tuneproof.data.collate import PadToLongest, RowsDataset

    width = min(spec.widths)
    gen = torch.Generator().manual_seed(spec.seed)
    rows = [{"input_ids": torch.randint(1, vocab, (width,), generator=gen).tolist()}
            for _ in range(spec.batch * steps)]  # fmt: skip
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            _sync(spec.device)
            self.t0 = time.perf_counter()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            _sync(spec.device)
            times.append(time.perf_counter() - self.t0)

    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=spec.batch, max_steps=steps, learning_rate=1e-12,
            save_strategy="no", report_to=[], disable_tqdm=True, logging_strategy="no", seed=spec.seed,
            use_cpu=spec.device == "cpu", remove_unused_columns=False, log_level="error",
        )  # fmt: skip
        data = RowsDataset(rows)
        trainer = Trainer(
            model=net, args=args, train_dataset=data, data_collator=PadToLongest(0), callbacks=[Clock()]
        )
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        trainer.remove_callback(PrinterCallback)  # stdout may carry the caller's JSON
        trainer.remove_callback(ProgressCallback)
        trainer.train()
    whole = float(np.median(times[2:]))
    bare_times = []
    for _ in range(steps):
        _sync(spec.device)
        t0 = time.perf_counter()
        bare()
        _sync(spec.device)
        bare_times.append(time.perf_counter() - t0)
    bare_s = float(np.median(bare_times[2:]))
    return max(whole - bare_s, 0.0), bare_s


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def probe_model(model: ResolvedModel, spec: ProbeSpec) -> Any:
    """`model` with random weights as `spec` trains it: LoRA adapters, gradient checkpointing, and
    train mode unless only the forward pass is timed."""
    from tuneproof.model import apply_lora, build_model, lora_targets

    net = build_model(model, spec.attn, device=spec.device, dtype=spec.torch_dtype, seed=spec.seed)
    if spec.mode == "lora":
        net = apply_lora(net, lora_targets(model.shape), spec.lora_rank)
    if spec.grad_ckpt:  # transformers 5 renamed it (the old name warns FutureWarning)
        enable = getattr(net, "activation_checkpointing_enable", None) or net.gradient_checkpointing_enable
        enable()
    net.train(spec.mode != "forward")
    return net


def width_steps(net: Any, spec: ProbeSpec, vocab: int) -> dict[int, Callable[[], None]]:
    """One step of `net` per distinct width of `spec`, on random token ids (drawn from `spec.seed`, not
    the global generator): forward only under no_grad, or forward, loss, backward and the gradients
    freed. Out of memory becomes `Skip`; any other error propagates."""
    import torch

    gen = torch.Generator().manual_seed(spec.seed)

    def make_step(width: int) -> Callable[[], None]:
        ids = torch.randint(0, vocab, (spec.batch, width), generator=gen).to(spec.device)

        def run() -> None:
            if spec.mode == "forward":
                with torch.no_grad():
                    net(input_ids=ids)
            else:
                net(input_ids=ids, labels=ids).loss.backward()
                net.zero_grad(set_to_none=True)

        def step() -> None:
            try:
                run()
            except (RuntimeError, MemoryError) as e:
                if not _is_oom(e):
                    raise
                if spec.device == "cuda":
                    torch.cuda.empty_cache()
                raise Skip(f"out of memory: {str(e).splitlines()[0][:120]}") from None

        return step

    return {w: make_step(w) for w in sorted(set(spec.widths))}


def analyse(
    model: ResolvedModel,
    spec: ProbeSpec,
    timing: Interleaved[int],
    kernel_ms: dict[int, list[dict[str, float]]],
    set_aside: dict[int, list[float]],
    first_table: KernelTable,
    peak: Any,
) -> ProbeResult:
    """The fit, the cross-check at the largest width, their notes, and the FLOP ledger with MFU for the
    measured step: everything the probe concludes from its measurements."""
    from tuneproof.flops import RunSpec, flop_report
    from tuneproof.model import lora_targets

    widths = sorted(timing.timings)
    ws, ts = timing_rows(timing)
    fit = fit_scaling(ws, ts, seed=spec.seed)
    profiled = max(widths)
    cross = cross_check(
        widths,
        [timing.timings[w].kept for w in widths],
        [np.array([[p[c] for c in PROFILE_COLUMNS] for p in kernel_ms[w]]) for w in widths],
        at=profiled,
        constant=fit.constant_in_model,
        seed=spec.seed,
    )
    for w, totals in set_aside.items():
        if totals:
            cross.notes.append(
                f"width {w}: {len(totals)} outlying profile(s) set aside and re-profiled (total "
                + ", ".join(f"{t:.1f}" for t in totals)
                + " ms)"
            )
    if fit.constant.verdict == "undetermined":
        cross.notes.append(
            "the constant test is undetermined, so both sides are fitted with a constant term: "
            "wider intervals, no assumption that per-step overhead is absent"
        )
    run = RunSpec(
        seq_len=profiled,
        batch=spec.batch,
        attn=spec.attn,
        mode=spec.mode,
        lora_rank=spec.lora_rank,
        lora_targets=tuple(lora_targets(model.shape)),
        grad_ckpt=spec.grad_ckpt,
    )
    report = flop_report(model.shape, run, step_time_s=timing.timings[profiled].median_s, peak=peak)
    return ProbeResult(model.name, spec, timing, fit, kernel_ms, first_table, cross, report, peak)


def timing_rows(timing: Interleaved[int]) -> tuple[np.ndarray, np.ndarray]:
    """(width, seconds) of every timed repeat, outliers included (the fit sets them aside itself)."""
    widths = sorted(timing.timings)
    ws = np.concatenate([[w] * len(timing.timings[w].times_s) for w in widths]).astype(float)
    return ws, np.concatenate([timing.timings[w].times_s for w in widths])


def _profile_widths(
    steps: dict[int, Callable[[], None]],
    spec: ProbeSpec,
    tmp: Path,
    keep: Path,
    progress: Callable[[str], None] | None,
) -> tuple[dict[int, list[dict[str, float]]], dict[int, list[float]], KernelTable]:
    """Profile every width `spec.profiles` times, interleaved like the timing. A profile whose total
    is an outlier among its width's (`robust.outliers`, from 3 profiles on) is set aside and the width
    profiled again, up to twice `spec.profiles` rounds. Returns the kept class times per width, the
    set-aside totals per width, and the largest width's first kernel table (its trace kept at `keep`)."""
    from tuneproof.measure import robust

    widths = sorted(steps)
    records: dict[int, list[dict[str, float]]] = {w: [] for w in widths}
    first: KernelTable | None = None

    def kept(w: int) -> list[dict[str, float]]:
        flags = robust.outliers([sum(p.values()) for p in records[w]])
        return [records[w][i] for i in np.flatnonzero(~flags)]

    for round_ in range(2 * spec.profiles):
        todo = [w for w in widths if round_ < spec.profiles or len(kept(w)) < spec.profiles]
        if not todo:
            break
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
    assert first is not None
    aside = {w: [sum(p.values()) for p in records[w] if p not in kept(w)] for w in widths}
    return {w: kept(w) for w in widths}, aside, first


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


def _keep(
    out: Path, trace: Path, timing: Interleaved[int], kernel_ms: dict[int, list[dict[str, float]]]
) -> dict[str, str]:
    """Write the points CSV, the kernel-class CSV and the gzipped trace into `out`, each atomically."""
    import gzip

    from tuneproof.io import atomic_write_bytes, atomic_write_text

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


def probe_peak(spec: ProbeSpec) -> Any:
    """The MFU denominator: the table peak for a known GPU, the measured peak otherwise (the CPU
    included), through `hardware.resolve_peak`, with the reason."""
    from tuneproof.hardware import resolve_peak
    from tuneproof.measure.peak import measure_peak

    gpu = None
    if spec.device == "cuda":
        import torch

        gpu = torch.cuda.get_device_name()

    # half a second per GEMM size: the MFU's context, not a benchmark (`tuneproof peak` takes longer)
    def measure() -> Any:
        return measure_peak(spec.device, spec.torch_dtype, max_seconds=0.5).as_peak()

    return resolve_peak(gpu, spec.torch_dtype, measure=measure)
