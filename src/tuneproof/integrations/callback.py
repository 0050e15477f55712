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
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

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


class TuneproofCallback(TrainerCallback):
    """Logs intended and performed TFLOP/s, both MFUs, padding and recompiles per logging step."""

    def __init__(self, gpu: str | None = None, peak_tflops: float | None = None) -> None:
        number = isinstance(peak_tflops, int | float) and not isinstance(peak_tflops, bool)
        if peak_tflops is not None and not (number and math.isfinite(peak_tflops) and peak_tflops > 0):
            raise TuneproofError(
                f"peak_tflops is {peak_tflops!r}", "pass the device's peak in TFLOP/s, e.g. 989"
            )
        self.gpu = gpu
        self.peak_tflops = peak_tflops
        self.history: list[StepFlops] = []  # every optimizer step of the run
        self._run: _Run | None = None
        self._pending: list[tuple[int, int, Any]] = []  # (batch, width, row lengths on device or None)
        self._unlogged: list[StepFlops] = []
        self._t0: float | None = None
        self._sync: Any = None

    # --- set-up ----------------------------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if model is None:
            return
        self._run = _read_run(model, args, self.gpu, self.peak_tflops)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self._run.hooks.append(base.register_forward_pre_hook(self._record, with_kwargs=True))
        import torch

        device = next(base.parameters()).device
        self._sync = torch.cuda.synchronize if device.type == "cuda" else None
        _log_first(self)
        if self._run.peak_tflops is None:
            warnings.warn(f"tuneproof: no MFU: {self._run.peak_source}", stacklevel=2)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._run is not None:
            for hook in self._run.hooks:
                hook.remove()
            self._run.hooks.clear()

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
    grad_ckpt = bool(
        getattr(base, "is_gradient_checkpointing", False) or getattr(args, "gradient_checkpointing", False)
    )
    dtype = next(base.parameters()).dtype
    tflops, source = _peak(gpu, peak_tflops, dtype, next(base.parameters()).device)
    ledger = MicroBatchLedger(resolved.shape, attn, mode, rank or 16, targets, grad_ckpt)
    return _Run(resolved.shape, attn, mode, rank or 16, targets, grad_ckpt, tflops, source, ledger)


def _lora(model: Any) -> tuple[int | None, tuple[str, ...]]:
    """The adapter's rank and its targets as paths inside a layer (`self_attn.q_proj`)."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return None, ()
    ranks: set[int] = set()
    targets: set[str] = set()
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and module.r:
            ranks.update(module.r.values())
            parts = name.split(".")
            if "layers" in parts:
                i = parts.index("layers")
                targets.add(".".join(p for p in parts[i + 2 :] if p != "base_layer"))
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

    dtype_name = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(dtype, str(dtype))
    try:
        peak = resolve_peak(name, dtype_name)
    except TuneproofError as e:
        return None, e.message
    if peak.tflops is None:
        return None, peak.reason or "the table has no peak for this device and dtype"
    return float(peak.tflops), peak.source or "GPU table"


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
        intended += i
        performed += p
        tokens += sum(rows)
        slots += batch * width
    return StepFlops(step, intended, performed, seconds, tokens, slots, len(pending))


class MicroBatchLedger:
    """(intended, performed) FLOPs of micro-batches of one run, cached. Intended is a sum over rows
    (each row's own length); performed is B x one row's for the paths that compute every row alike
    (eager, sdpa: each row at the padded width, the causal skip lost when any row is padded), else the
    ledger on the whole micro-batch."""

    def __init__(
        self, shape: Any, attn: str, mode: str, lora_rank: int, targets: tuple[str, ...], ckpt: bool
    ):
        self.shape = shape
        self.options: dict[str, Any] = dict(
            attn=attn, mode=mode, lora_rank=lora_rank, lora_targets=targets or ("all-linear",), grad_ckpt=ckpt
        )
        self._row_intended: dict[int, float] = {}
        self._row_performed: dict[tuple[int, bool], float] = {}
        self._batch: dict[tuple[int, tuple[int, ...]], float] = {}

    def _report(self, width: int, batch: int = 1, lengths: tuple[int, ...] | None = None) -> Any:
        from tuneproof.flops import RunSpec, flop_report

        return flop_report(self.shape, RunSpec(seq_len=width, batch=batch, lengths=lengths, **self.options))

    def micro_batch(self, batch: int, width: int, rows: tuple[int, ...]) -> tuple[float, float]:
        intended = 0.0
        for length in rows:
            if length not in self._row_intended:
                self._row_intended[length] = (
                    float(self._report(max(length, 1)).intended.total) if length else 0.0
                )
            intended += self._row_intended[length]
        padded = any(length < width for length in rows)
        if self.options["attn"] in ROW_UNIFORM_PATHS:
            key = (width, padded)
            if key not in self._row_performed:
                lengths = (width - 1,) if padded and width > 1 else None
                self._row_performed[key] = float(self._report(width, 1, lengths).performed.total)
            return intended, batch * self._row_performed[key]
        full = (width, rows)
        if full not in self._batch:
            self._batch[full] = float(self._report(width, batch, rows).performed.total)
        return intended, self._batch[full]
