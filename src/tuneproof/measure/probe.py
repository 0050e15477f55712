"""`tuneproof probe`: time a real training step at several widths, fit t = A*w + B*w^2, profile the
largest width, and cross-check the fit's quadratic share against the kernels' attention share.

The two methods share no assumptions (one times whole steps, the other reads kernel names); when
they agree, the quadratic term is attention. A training step is forward, loss and backward, no
optimizer; `forward` mode times the forward only.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.errors import TuneproofError
from tuneproof.measure.fit import MIN_SPAN, MIN_WIDTHS, ScalingFit, fit_scaling
from tuneproof.measure.kernels import KernelTable, kernel_table, load_trace
from tuneproof.measure.timing import Timing, time_fn

AGREE_POINTS = 5.0


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    config: str = "tiny"
    attn: str = "sdpa"
    widths: tuple[int, ...] = (512, 1024, 2048)
    batch: int = 1
    mode: str = "full"
    grad_ckpt: bool = False
    device: str = "cpu"
    dtype: str | None = None  # None: fp32 on CPU, bf16 on CUDA
    repeats: int = 3
    lora_rank: int = 16

    def __post_init__(self) -> None:
        if len(set(self.widths)) < MIN_WIDTHS:
            raise TuneproofError(
                f"--widths needs at least {MIN_WIDTHS} distinct widths, got {list(self.widths)}",
                "e.g. --widths 512,1024,2048",
            )
        if any(w <= 0 for w in self.widths):
            raise TuneproofError("--widths must be positive", "e.g. --widths 512,1024,2048")
        if max(self.widths) / min(self.widths) < MIN_SPAN:
            raise TuneproofError(
                f"--widths span {max(self.widths) / min(self.widths):.2f}x, the fit needs {MIN_SPAN:g}x",
                f"add a width of {int(min(self.widths) * MIN_SPAN)} or more",
            )
        if self.attn not in ("sdpa", "eager", "flex_attention"):
            raise TuneproofError(
                f"--attn {self.attn!r} cannot be probed", "use sdpa, eager or flex_attention"
            )
        if self.mode not in ("forward", "full", "lora"):
            raise TuneproofError(f"--mode {self.mode!r} is not known", "use forward, full or lora")
        if self.device not in ("cpu", "cuda"):
            raise TuneproofError(f"--device {self.device!r} is not known", "use cpu or cuda")
        if self.attn == "flex_attention" and self.device == "cpu" and self.mode != "forward":
            raise TuneproofError(
                "flex_attention has no backward on CPU (PyTorch raises NotImplementedError)",
                "use --mode forward, another --attn, or --device cuda",
            )
        if self.grad_ckpt and self.mode == "forward":
            raise TuneproofError("--grad-ckpt needs a backward pass", "use --mode full or --mode lora")
        if self.batch < 1 or self.repeats < 2:
            raise TuneproofError("--batch must be >= 1 and --repeats >= 2", "fix the flag")

    @property
    def torch_dtype(self) -> str:
        return self.dtype or ("bf16" if self.device == "cuda" else "fp32")


@dataclass(slots=True)
class ProbeResult:
    spec: ProbeSpec
    timings: dict[int, Timing]
    skipped: dict[int, str]
    fit: ScalingFit
    kernels: KernelTable
    profiled_width: int
    flops: Any  # FlopReport at the profiled width
    peak: Any  # hardware.Peak used for MFU
    files: dict[str, str] = field(default_factory=dict)

    @property
    def quad_share(self) -> float:
        return self.fit.quad_share[float(self.profiled_width)]

    @property
    def gap_points(self) -> float:
        return 100 * (self.quad_share - self.kernels.share("attention"))

    @property
    def verdict(self) -> str:
        return "agree" if abs(self.gap_points) <= AGREE_POINTS else "disagree"

    @property
    def meaning(self) -> str:
        if self.verdict == "agree":
            return "two measurements with no shared assumptions agree: the quadratic term is attention"
        if self.gap_points > 0:
            return (
                "the fit's quadratic term holds more than the attention kernels: O(T^2) work outside them "
                "(mask materialisation, elementwise ops on score-sized tensors) or profiler overhead"
            )
        return (
            "attention kernels carry work that is linear in width, or the timed widths are overhead-bound "
            "(see the constant-term test)"
        )

    def cross_check_line(self) -> str:
        return (
            f"quadratic share (fit) {100 * self.quad_share:.1f} % vs attention share (kernels) "
            f"{100 * self.kernels.share('attention'):.1f} %: gap {abs(self.gap_points):.1f} points "
            f"at width {self.profiled_width}: {self.verdict}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": {k: getattr(self.spec, k) for k in self.spec.__dataclass_fields__},
            "points": [{"width": w, **t.to_dict()} for w, t in sorted(self.timings.items())],
            "skipped": [{"width": w, "reason": r} for w, r in sorted(self.skipped.items())],
            "fit": self.fit.to_dict(),
            "kernels": self.kernels.to_dict(),
            "cross_check": {
                "width": self.profiled_width,
                "quad_share_fit": self.quad_share,
                "attention_share_kernels": self.kernels.share("attention"),
                "gap_points": abs(self.gap_points),
                "verdict": self.verdict,
                "meaning": self.meaning,
            },
            "flops": self.flops.to_dict(),
            "files": self.files,
        }


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or "out of memory" in str(e).lower()


def run_probe(
    spec: ProbeSpec, out: Path | None = None, progress: Callable[[str], None] | None = None
) -> ProbeResult:
    """Time, fit, profile and cross-check. Widths that run out of memory are skipped and reported."""
    import torch

    from tuneproof.arch import from_config, resolve_text_config, tiny_config_path
    from tuneproof.flops import RunSpec, flop_report
    from tuneproof.model import apply_lora, build_model, lora_targets

    if spec.device == "cuda" and not torch.cuda.is_available():
        raise TuneproofError("--device cuda but torch sees no CUDA device", "use --device cpu")
    source = tiny_config_path() if spec.config == "tiny" else Path(spec.config)
    text_config = resolve_text_config(source)
    shape = from_config(text_config)
    model = build_model(text_config, spec.attn, device=spec.device, dtype=spec.torch_dtype)
    targets = lora_targets(shape)
    if spec.mode == "lora":
        model = apply_lora(model, targets, spec.lora_rank)
    if spec.grad_ckpt:
        model.gradient_checkpointing_enable()
    model.train(spec.mode != "forward")
    vocab = int(text_config.vocab_size)

    def make_step(width: int) -> Callable[[], None]:
        ids = torch.randint(0, vocab, (spec.batch, width), device=spec.device)
        if spec.mode == "forward":

            def step() -> None:
                with torch.no_grad():
                    model(input_ids=ids)
        else:

            def step() -> None:
                model(input_ids=ids, labels=ids).loss.backward()
                model.zero_grad(set_to_none=True)

        return step

    timings: dict[int, Timing] = {}
    skipped: dict[int, str] = {}
    for width in sorted(set(spec.widths)):
        if progress:
            progress(f"timing width {width}")
        try:
            timings[width] = time_fn(make_step(width), repeats=spec.repeats, warmup=1, device=spec.device)
        except (RuntimeError, MemoryError) as e:
            if not _is_oom(e):
                raise
            skipped[width] = f"out of memory: {str(e).splitlines()[0][:120]}"
            if spec.device == "cuda":
                torch.cuda.empty_cache()
    if len(timings) < MIN_WIDTHS:
        raise TuneproofError(
            f"only {len(timings)} width(s) ran ({', '.join(f'{w}: {r}' for w, r in skipped.items())})",
            "use smaller --widths or --batch",
        )
    import numpy as np

    ws = np.concatenate([[w] * len(t.times_s) for w, t in timings.items()]).astype(float)
    ts = np.concatenate([t.times_s for t in timings.values()])
    fit = fit_scaling(ws, ts)

    profiled = max(timings)
    if progress:
        progress(f"profiling width {profiled}")
    with tempfile.TemporaryDirectory() as tmp:
        trace_path = Path(tmp) / "trace.json"
        _profile(make_step(profiled), spec.device, trace_path)
        kernels = kernel_table(load_trace(trace_path))
        files = _keep(out, trace_path, ws, ts) if out is not None else {}

    run = RunSpec(
        seq_len=profiled,
        batch=spec.batch,
        attn=spec.attn,
        mode=spec.mode,
        lora_rank=spec.lora_rank,
        lora_targets=tuple(targets),
        grad_ckpt=spec.grad_ckpt,
    )
    if progress:
        progress("peak")
    peak = _peak(spec)
    report = flop_report(shape, run, step_time_s=timings[profiled].median_s, peak=peak)
    result = ProbeResult(spec, timings, skipped, fit, kernels, profiled, report, peak, files)
    if out is not None:
        from tuneproof.io import atomic_write_json

        result.files["json"] = str(out / "probe.json")
        atomic_write_json(out / "probe.json", result.to_dict())
    return result


def _profile(step: Callable[[], None], device: str, path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    step()  # warm
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


def _keep(out: Path, trace: Path, ws: Any, ts: Any) -> dict[str, str]:
    """Write the points CSV and the gzipped trace into `out`, each atomically."""
    import gzip

    from tuneproof.io import atomic_write_bytes, atomic_write_text

    csv = "width,seconds\n" + "".join(f"{int(w)},{float(t)!r}\n" for w, t in zip(ws, ts, strict=True))
    points = atomic_write_text(out / "points.csv", csv)
    trace_gz = atomic_write_bytes(out / "trace.json.gz", gzip.compress(trace.read_bytes()))
    return {"points": str(points), "trace": str(trace_gz)}


def _peak(spec: ProbeSpec) -> Any:
    """Table peak for a known GPU; the measured peak otherwise (the CPU included), labelled as such."""
    from tuneproof.hardware import Peak, lookup_gpu, peak_for
    from tuneproof.measure.peak import measure_peak

    if spec.device == "cuda":
        import torch

        try:
            table = peak_for(lookup_gpu(torch.cuda.get_device_name()), spec.torch_dtype)
            if table.tflops is not None:
                return table
        except TuneproofError:
            pass
    measured = measure_peak(spec.device, spec.torch_dtype, repeats=3)
    return Peak(measured.tflops, f"measured peak ({measured.size}^3 GEMM on {spec.device})", measured.dtype)
