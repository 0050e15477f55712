"""Honest FLOPs and MFU inside `transformers.Trainer`, logged next to the loss.

    trainer.add_callback(TuneproofCallback(gpu=None, peak_tflops=None))

The run is read from the model itself: its shape from `model.config`, LoRA rank and targets from the
PEFT wrappers, activation checkpointing, the attention implementation in use. A forward pre-hook,
active only in training, records every micro-batch's real shape (batch, padded width, real lengths
from the attention mask); the FLOP ledger turns them into intended FLOPs (real tokens, causal skip,
window) and performed FLOPs (what the attention path computes: padding, lost skips), summed over the
gradient-accumulation window. Step time is the wall time from `on_step_begin` to `on_step_end` (the
micro-batches, the optimizer step), with the device synchronised at those two points only.

Per logging step the Trainer's logs gain `tuneproof/tflops_intended`, `tuneproof/tflops_performed`,
`tuneproof/mfu_intended`, `tuneproof/mfu_performed`, `tuneproof/padding` (share of token slots that
are padding) and `tuneproof/recompiles` (frames dynamo compiled after the first optimizer step: new
shapes or guards failing), so every `report_to` backend gets them. The peak is the GPU table's
(datasheet) or `peak_tflops` (given); on a device the table does not know, the MFUs are left out and
the reason is warned once.
"""

from __future__ import annotations

import gc
import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from tuneproof.dtypes import short_name
from tuneproof.errors import TuneproofError

PREFIX = "tuneproof/"
# paths whose performed FLOPs depend on the batch only through (B, T, any row padded): the ledger
# is then B x one row's (checked against the ledger itself in tests/test_callback.py)
ROW_UNIFORM_PATHS = ("eager", "sdpa")


@dataclass(frozen=True, slots=True)
class StepFlops:
    """One optimizer step: FLOPs summed over its micro-batches, and its wall time."""

    step: int
    intended: float
    performed: float
    seconds: float
    tokens: int  # real tokens
    slots: int  # token slots (batch x padded width)
    micro_batches: int


@dataclass(slots=True)
class _Run:
    shape: Any
    attn: str
    mode: str
    lora_rank: int
    lora_targets: tuple[str, ...]
    grad_ckpt: bool
    peak_tflops: float | None
    peak_source: str
    ledger: MicroBatchLedger
    hooks: list[Any] = field(default_factory=list)
    frames_at_first_step: int | None = None  # dynamo frames compiled by the end of the first step
    warned_recompiles: bool = False
    capability: tuple[int, int] | None = None  # CUDA compute capability; None on the CPU
    # per padded width: micro-batches seen, and the first one's (batch, row lengths), for the report
    widths_seen: dict[int, list[Any]] = field(default_factory=dict)
    dtype: str = "bf16"


class TuneproofCallback(TrainerCallback):
    """Logs intended and performed TFLOP/s, both MFUs, padding and recompiles per logging step."""

    def __init__(self, gpu: str | None = None, peak_tflops: float | None = None, widths: Any = None) -> None:
        """`widths`: the padded widths the batches will have (`BucketBatchSampler.widths()`), priced
        once at train begin so that no step pays for a width seen the first time."""
        number = isinstance(peak_tflops, int | float) and not isinstance(peak_tflops, bool)
        if peak_tflops is not None and not (number and math.isfinite(peak_tflops) and peak_tflops > 0):
            raise TuneproofError(
                f"peak_tflops is {peak_tflops!r}", "pass the device's peak in TFLOP/s, e.g. 989"
            )
        self.gpu = gpu
        self.peak_tflops = peak_tflops
        self.widths = sorted({int(w) for w in widths}) if widths is not None else []
        self.history: list[StepFlops] = []  # every optimizer step of the run
        self._run: _Run | None = None
        self._pending: list[tuple[int, int, Any]] = []  # (batch, width, row lengths on device or None)
        self._unlogged: list[StepFlops] = []
        self._t0: float | None = None
        self._sync: Any = None
        self.health: Any = (
            None  # adapter health at train end (tuneproof.ship.health.Health), PEFT models only
        )
        self.fingerprint_path: Any = None  # where the base's fingerprint was written, if it was

    # --- set-up ----------------------------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if model is None:
            return
        self._run = _read_run(model, args, self.gpu, self.peak_tflops)
        self._run.ledger.prewarm(self.widths)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self._run.hooks.append(base.register_forward_pre_hook(self._record, with_kwargs=True))
        import torch

        device = next(base.parameters()).device
        self._sync = torch.cuda.synchronize if device.type == "cuda" else None
        _log_first(self)
        if self._run.peak_tflops is None:
            warnings.warn(f"tuneproof: no MFU: {self._run.peak_source}", stacklevel=2)

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """Adapter health into the log, and the base's fingerprint beside the outputs (the file
        `tuneproof merge` checks the base against)."""
        if self._run is not None:
            for hook in self._run.hooks:
                hook.remove()
            self._run.hooks.clear()
        if model is None or not getattr(state, "is_world_process_zero", True):
            return
        self.health = _adapter_health(model)
        if self.health is not None:
            print(f"tuneproof: adapter health: {self.health.summary()}", file=sys.stderr)
        self.fingerprint_path = _record_base(model, args.output_dir)

    def _record(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Forward pre-hook: the micro-batch's shape, no device sync (the row sums stay on the device)."""
        if not module.training:
            return
        ids = kwargs.get("input_ids")
        if ids is None:
            ids = args[0] if args else kwargs.get("inputs_embeds")
        if ids is None:
            return
        batch, width = int(ids.shape[0]), int(ids.shape[1])
        mask = kwargs.get("attention_mask")
        lengths = mask.sum(dim=1) if mask is not None and getattr(mask, "dim", lambda: 0)() == 2 else None
        self._pending.append((batch, width, lengths))

    def typical_micro_batch(self) -> Any:
        """The FLOP ledger (`FlopReport`) of one real micro-batch of the run at its median padded width
        (the first micro-batch seen at that width, its own row lengths), or None before any step."""
        if self._run is None or not self._run.widths_seen:
            return None
        from tuneproof.flops import RunSpec, flop_report

        seen = self._run.widths_seen
        order = sorted(seen)
        counts = [seen[w][0] for w in order]
        half, total = sum(counts) / 2, 0
        width = order[-1]
        for w, c in zip(order, counts, strict=True):
            total += c
            if total >= half:
                width = w
                break
        _, batch, rows = seen[width]
        run = RunSpec(seq_len=width, batch=batch, lengths=rows, **self._run.ledger.options)
        return flop_report(self._run.shape, run)

    # --- timing ----------------------------------------------------------------------------------------

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._sync is not None:
            self._sync()
        self._t0 = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._run is None or self._t0 is None:
            return
        if self._sync is not None:
            self._sync()
        seconds = time.perf_counter() - self._t0
        self._t0 = None
        pending, self._pending = self._pending, []
        self._unlogged.append(_step_flops(self._run, state.global_step, pending, seconds))
        if self._run.frames_at_first_step is None:
            self._run.frames_at_first_step = _frames_compiled()
            for line in first_step_warnings(self._run, self._unlogged[-1], pending, bool(self.widths)):
                warnings.warn(f"tuneproof: {line}", stacklevel=2)
        self.history.append(self._unlogged[-1])

    # --- logging ---------------------------------------------------------------------------------------

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is None or self._run is None or not self._unlogged or "loss" not in logs:
            return
        steps, self._unlogged = self._unlogged, []
        seconds = sum(s.seconds for s in steps)
        intended = sum(s.intended for s in steps) / seconds / 1e12 if seconds > 0 else math.nan
        performed = sum(s.performed for s in steps) / seconds / 1e12 if seconds > 0 else math.nan
        slots = sum(s.slots for s in steps)
        metrics = {
            f"{PREFIX}tflops_intended": intended,
            f"{PREFIX}tflops_performed": performed,
            f"{PREFIX}padding": 1 - sum(s.tokens for s in steps) / slots if slots else math.nan,
            f"{PREFIX}recompiles": _frames_compiled() - (self._run.frames_at_first_step or 0),
        }
        limit = _recompile_limit()
        recompiles = metrics[f"{PREFIX}recompiles"]
        near = self._run.attn == "flex_attention" and limit and recompiles >= 0.8 * limit
        if near and not self._run.warned_recompiles:
            self._run.warned_recompiles = True
            warnings.warn(
                f"tuneproof: {recompiles} recompiles, near dynamo's limit of {limit}: past it compiled flex "
                "falls back to eager and materialises every score (bucket the widths, or raise "
                "torch._dynamo.config.recompile_limit)",
                stacklevel=2,
            )
        if self._run.peak_tflops:
            metrics[f"{PREFIX}mfu_intended"] = intended / self._run.peak_tflops
            metrics[f"{PREFIX}mfu_performed"] = performed / self._run.peak_tflops
        logs.update(metrics)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(metrics)


# --- reading the run from the model ----------------------------------------------------------------------


def _read_run(model: Any, args: Any, gpu: str | None, peak_tflops: float | None) -> _Run:
    from tuneproof.arch import resolve

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    resolved = resolve(base.config)
    rank, targets = _lora(model)
    trains = any(p.requires_grad for p in model.parameters())
    mode = "lora" if targets else ("full" if trains else "forward")
    attn = getattr(base.config, "_attn_implementation", None) or "eager"
    grad_ckpt = bool(_checkpointing(base) or getattr(args, "gradient_checkpointing", False))
    dtype = next(base.parameters()).dtype
    tflops, source = _peak(gpu, peak_tflops, dtype, next(base.parameters()).device)
    ledger = MicroBatchLedger(resolved.shape, attn, mode, rank or 16, targets, grad_ckpt)
    device = next(base.parameters()).device
    capability = None
    if device.type == "cuda":
        import torch

        capability = tuple(torch.cuda.get_device_capability(device))
    named = short_name(
        dtype
    )  # the dispatch rules know bf16, fp16 and fp32: anything else is explained as fp32
    dtype_name = named if named in ("bf16", "fp16") else "fp32"
    return _Run(
        resolved.shape, attn, mode, rank or 16, targets, grad_ckpt, tflops, source, ledger,
        capability=capability, dtype=dtype_name,  # type: ignore[arg-type]
    )  # fmt: skip


def _checkpointing(base: Any) -> bool:
    """transformers 5 names it is_activation_checkpointing (is_gradient_checkpointing warns)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(base), name):
            return bool(getattr(base, name))
    return False


def _lora(model: Any) -> tuple[int | None, tuple[str, ...]]:
    """The adapter's rank and its targets as paths inside a layer (`self_attn.q_proj`)."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return None, ()
    from peft.tuners.lora import ParamWrapper

    ranks: set[int] = set()
    targets: set[str] = set()
    experts = False
    for name, module in model.named_modules():
        experts = experts or (isinstance(module, ParamWrapper) and bool(module.r))
        if isinstance(module, LoraLayer) and module.r and not isinstance(module, ParamWrapper):
            ranks.update(module.r.values())
            parts = name.split(".")
            if "layers" in parts:
                i = parts.index("layers")
                targets.add(".".join(p for p in parts[i + 2 :] if p != "base_layer"))
    if experts:
        warnings.warn(
            "tuneproof: LoRA on fused expert parameters (target_parameters) is not in the FLOP ledger: "
            "the logged FLOPs leave out its GEMMs, so they undercount by that share",
            stacklevel=3,
        )
    if len(ranks) > 1:
        warnings.warn(
            f"tuneproof: adapters of several ranks {sorted(ranks)}: FLOPs use the largest", stacklevel=3
        )
    return (max(ranks) if ranks else None), tuple(sorted(t for t in targets if t))


def _peak(gpu: str | None, given: float | None, dtype: Any, device: Any) -> tuple[float | None, str]:
    import torch

    if given is not None:
        return float(given), f"given: {given:g} TFLOP/s"
    name = gpu or (torch.cuda.get_device_name(device) if device.type == "cuda" else None)
    if name is None:
        return None, f"no peak for a {device.type} device (pass gpu= or peak_tflops=)"
    from tuneproof.hardware import resolve_peak

    dtype_name = short_name(dtype) or str(dtype)  # an unknown one gets no peak, with its name
    try:
        peak = resolve_peak(name, dtype_name)
    except TuneproofError as e:
        return None, e.message
    if peak.tflops is None:
        return None, peak.reason or "the table has no peak for this device and dtype"
    return float(peak.tflops), peak.source or "GPU table"


def _adapter_health(model: Any) -> Any:
    try:
        from peft import PeftModel
    except ImportError:
        return None
    if not isinstance(model, PeftModel):
        return None
    from tuneproof.ship.health import live_health

    return live_health(model)


def _record_base(model: Any, output_dir: str | None) -> Any:
    """Write the fingerprint of the base's weight files to OUTPUT_DIR/base_fingerprint.json, when the
    base was loaded from a local folder (or the hub cache); otherwise warn that it cannot be recorded."""
    from pathlib import Path

    from tuneproof.ship.identity import FINGERPRINT_NAME, fingerprint

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    source = getattr(base.config, "_name_or_path", "") or ""
    folder = Path(source) if source and Path(source).is_dir() else _hub_snapshot(source)
    if output_dir is None:
        return None
    if folder is None or not any(folder.glob("*.safetensors")):
        warnings.warn(
            f"tuneproof: the base ({source or 'built from a config'}) is not a local safetensors folder: "
            "no base_fingerprint.json (record one with tuneproof fingerprint)",
            stacklevel=3,
        )
        return None
    from tuneproof.io import atomic_write_json

    record = fingerprint(folder).to_json()
    return atomic_write_json(Path(output_dir) / FINGERPRINT_NAME, record)


def _hub_snapshot(name: str) -> Any:
    """The local snapshot folder of a hub id, if it is in the cache (never downloads)."""
    if not name:
        return None
    try:
        from pathlib import Path

        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True))
    except Exception:  # not cached, not a hub id, offline: nothing to fingerprint
        return None


def _log_first(callback: TuneproofCallback) -> None:
    """Run this callback's on_log before the reporting callbacks (TensorBoard, W&B, the console), so
    they see its numbers: `add_callback` appends after them, so move it to the front of the handler."""
    from transformers.trainer_callback import CallbackHandler

    for holder in gc.get_referrers(callback):
        if not isinstance(holder, list):
            continue
        for owner in gc.get_referrers(holder):
            handler = owner if isinstance(owner, CallbackHandler) else None
            if handler is None and isinstance(owner, dict):
                handler = next((h for h in gc.get_referrers(owner) if isinstance(h, CallbackHandler)), None)
            if handler is not None and handler.callbacks is holder:
                holder.remove(callback)
                holder.insert(0, callback)
                return


PADDING_WARN = 0.10  # padding share of the first step worth a warning


def first_step_warnings(
    run: _Run, step: StepFlops, pending: list[tuple[int, int, Any]], bucketed: bool = False
) -> list[str]:
    """One-line warnings from the first step's real batches: the explainer's slow-path advice for its
    widest micro-batch (masks materialised on sliding layers, head_dim past a backend's limit, padded
    batches on global layers), and padding above 10 %. `bucketed`: the batches come from the bucketing
    sampler already, so advice to bucket is left out."""
    out = []
    padding = 1 - step.tokens / step.slots if step.slots else 0.0
    if padding > PADDING_WARN:
        out.append(
            f"{100 * padding:.0f} % of the first step's token slots are padding: bucket by length "
            "(tuneproof.integrations.hf.use_bucketing) or pack"
        )
    if not pending:
        return out
    from tuneproof.attention.dispatch import BUCKET_ADVICE, FLEX_ADVICE, Context, explain

    batch, width, lengths = max(pending, key=lambda p: p[1])
    rows = tuple(int(x) for x in lengths.tolist()) if lengths is not None else (width,) * batch
    padded = any(n < width for n in rows)
    try:
        ctx = Context(
            seq_len=width, batch=batch, attn=run.attn, padded=padded, dtype=run.dtype, training=True,
            capability=run.capability,
        )  # fmt: skip
        advice = explain(run.shape, ctx, live=False).advice
    except TuneproofError as e:  # an attention path or device the explainer does not model
        return [*out, f"the attention dispatch cannot be explained here: {e.message}"]
    share = _attention_excess_share(run, batch, width, rows)
    if share < SLOW_PATH_WARN:  # the FLOP-only advice would save less than this: not worth a warning
        advice = [a for a in advice if not a.startswith((FLEX_ADVICE, BUCKET_ADVICE))]
    if bucketed:
        advice = [a for a in advice if not a.startswith(BUCKET_ADVICE)]
    return out + [
        f"slow attention path at width {width} ({100 * share:.1f} % of the micro-batch's FLOPs are "
        f"attention excess): {line}"
        for line in advice
    ]


SLOW_PATH_WARN = 0.02  # attention excess share of the widest first micro-batch worth a warning


def _attention_excess_share(run: _Run, batch: int, width: int, rows: tuple[int, ...]) -> float:
    """The ledger's per-attention-group excess (dense squares on sliding layers, is_causal lost to
    padding) as a share of the micro-batch's performed FLOPs."""
    from tuneproof.flops import RunSpec, flop_report

    report = flop_report(run.shape, RunSpec(seq_len=width, batch=batch, lengths=rows, **run.ledger.options))
    groups = {label for label in run.shape.attention_groups()}
    excess = sum(e.flops for e in report.excess if any(f", {g})" in e.name for g in groups))
    return excess / report.performed.total if report.performed.total else 0.0


def _recompile_limit() -> int | None:
    try:
        import torch._dynamo

        return int(
            getattr(torch._dynamo.config, "recompile_limit", None) or torch._dynamo.config.cache_size_limit
        )
    except (ImportError, AttributeError):
        return None


def _frames_compiled() -> int:
    """Frames dynamo has compiled in this process (`torch._dynamo.utils.counters`); 0 without dynamo."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return int(counters["frames"].get("ok", 0))


# --- FLOPs of a step -------------------------------------------------------------------------------------


def _step_flops(run: _Run, step: int, pending: list[tuple[int, int, Any]], seconds: float) -> StepFlops:
    intended = performed = 0.0
    tokens = slots = 0
    for batch, width, lengths in pending:
        rows = [int(x) for x in lengths.tolist()] if lengths is not None else [width] * batch
        i, p = run.ledger.micro_batch(batch, width, tuple(rows))
        run.widths_seen.setdefault(width, [0, batch, tuple(rows)])[0] += 1
        intended += i
        performed += p
        tokens += sum(rows)
        slots += batch * width
    return StepFlops(step, intended, performed, seconds, tokens, slots, len(pending))


class RowFit:
    """FLOPs of one row as a function of its length, from the ledger, made cheap: the ledger is fitted
    on sample lengths to a x L + b x L^2 + sum_w c_w x pairs_w(L) (pairs_w(L): query-key pairs of a
    causal window w), and the fit is used only if it reproduces the ledger exactly (relative 1e-9) at
    lengths it was not fitted on; otherwise every length goes to the ledger, memoised. Intended FLOPs
    always fit (linear layers per token, attention per causal pair); performed ones fit for paths
    without width-dependent dispatch or blocks (eager)."""

    def __init__(self, ledger: Any, windows: list[int], seed: int = 0) -> None:
        import numpy as np

        self.ledger = ledger
        self.windows = windows
        self.memo: dict[int, float] = {}
        sample = sorted({2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610}
                        | {w + d for w in windows for d in (-1, 0, 1, w)} - {0, 1})  # fmt: skip
        basis = np.array([self._basis(n) for n in sample])
        values = np.array([self._exact(n) for n in sample])
        self.coef: Any = np.linalg.lstsq(basis, values, rcond=None)[0]
        rng = np.random.default_rng(seed)
        held_out = [int(n) for n in rng.integers(2, 4 * max([610, *windows]), 6)]
        if any(abs(self._fitted(n) - self._exact(n)) > 1e-9 * abs(self._exact(n)) for n in held_out):
            self.coef = None

    def _basis(self, n: int) -> list[float]:
        x = float(n)
        pairs = [x * (x + 1) / 2 if n <= w else w * (w + 1) / 2 + (x - w) * w for w in self.windows]
        return [x, x * x, *pairs]

    def _fitted(self, n: int) -> float:
        return float(sum(c * b for c, b in zip(self.coef, self._basis(n), strict=True)))

    def _exact(self, n: int) -> float:
        if n not in self.memo:
            self.memo[n] = float(self.ledger(n))
        return self.memo[n]

    @property
    def fitted(self) -> bool:
        return self.coef is not None

    def __call__(self, n: int) -> float:
        if n <= 0:
            return 0.0
        return self._fitted(n) if self.coef is not None and n > 1 else self._exact(n)


class MicroBatchLedger:
    """(intended, performed) FLOPs of micro-batches of one run, equal to `flop_report` on each
    micro-batch (tested) at a small fraction of its cost. Intended is a sum over rows (each row's own
    length, `RowFit`); performed is B x one row's for the paths that compute every row alike (eager,
    sdpa: each row at the padded width, the causal skip lost when any row is padded), else the ledger
    on the whole micro-batch, memoised."""

    def __init__(
        self, shape: Any, attn: str, mode: str, lora_rank: int, targets: tuple[str, ...], ckpt: bool
    ):
        self.shape = shape
        self.options: dict[str, Any] = dict(
            attn=attn, mode=mode, lora_rank=lora_rank, lora_targets=targets or ("all-linear",), grad_ckpt=ckpt
        )
        windows = sorted({layer.attention.window for layer in shape.layers if layer.attention.window})
        self.intended = RowFit(lambda n: self._totals(n)[0], windows)
        self.performed: dict[bool, RowFit] = {}
        if attn in ROW_UNIFORM_PATHS:
            self.performed = {
                padded: RowFit(lambda n, p=padded: self._totals(n, 1, (n - 1,) if p else None)[1], windows)
                for padded in (False, True)
            }
        self._batch: dict[tuple[int, tuple[int, ...]], float] = {}

    def _totals(
        self, width: int, batch: int = 1, lengths: tuple[int, ...] | None = None
    ) -> tuple[float, float]:
        from tuneproof.flops import RunSpec
        from tuneproof.flops.report import step_totals

        return step_totals(self.shape, RunSpec(seq_len=width, batch=batch, lengths=lengths, **self.options))

    def prewarm(self, widths: list[int]) -> None:
        """Price these widths now (padded and not) where performed FLOPs are memoised per width."""
        for fit in self.performed.values():
            for width in widths:
                if width > 1:
                    fit(width)

    def micro_batch(self, batch: int, width: int, rows: tuple[int, ...]) -> tuple[float, float]:
        intended = sum(self.intended(length) for length in rows)
        padded = any(length < width for length in rows)
        if self.performed:
            return intended, batch * self.performed[padded](width)
        key = (width, rows)
        if key not in self._batch:
            self._batch[key] = self._totals(width, batch, rows)[1]
        return intended, self._batch[key]
