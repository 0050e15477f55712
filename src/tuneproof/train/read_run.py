"""The run as `TuneproofCallback` reads it from the model itself, at train begin: the shape from
`model.config`, and the step (`tuneproof.runs.step.Step`, the one step type) from the model and the
Trainer's arguments: the LoRA rank, targets and target parameters (fused experts) from the PEFT
wrappers, activation checkpointing, the attention implementation in use; the dtype and device, and
the peak the MFUs are taken against. `CallbackState` holds that and what the callback has seen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuneproof.core.dtypes import short_name
from tuneproof.core.errors import TuneproofError
from tuneproof.flops.microbatch import MicroBatchLedger
from tuneproof.hardware.card import CPU, Card, of_capability
from tuneproof.runs.implementations import implementation
from tuneproof.runs.step import Step


@dataclass(kw_only=True, slots=True)
class CallbackState:
    shape: Any
    step: Step  # the run's step at any width: attention path, mode, adapters, checkpointing
    peak_tflops: float | None
    peak_source: str
    ledger: MicroBatchLedger
    hooks: list[Any] = field(default_factory=list)
    frames_at_first_step: int | None = None  # dynamo frames compiled by the end of the first step
    warned_recompiles: bool = False
    card: Card = CPU  # the card the model's weights are on (its capability), or the CPU
    # per padded width: micro-batches seen, and the first one's (batch, row lengths), for the report
    widths_seen: dict[int, list[Any]] = field(default_factory=dict)
    dtype: str = "bf16"
    notes: list[str] = field(default_factory=list)  # what reading the run found worth a warning
    pad_id: int | None = None  # the config's pad token: padding read from it when no mask is sent
    eos_id: int | None = None  # the tokenizer's EOS (else the config's first): the in-loop EOS check
    use_cache: bool = False  # the config's use_cache at train begin (a forward's own kwarg wins)
    dropout: float = 0.0  # the config's attention_dropout: SDPA gets it in training
    # why the model's own forward hides packed rows from transformers on this path ("" where it does
    # not), read from its modeling file on the first packed batch (`attention.packed_detection`)
    _hidden_packing: str | None = None
    resolved: Any = None  # the ResolvedModel, for the memory ledger's prediction

    def caches(self, kwargs: dict[str, Any]) -> bool:
        """Whether this forward builds a KV cache (which turns off transformers' packed detection)."""
        given = kwargs.get("use_cache")
        return bool(self.use_cache if given is None else given) or kwargs.get("past_key_values") is not None

    @property
    def attn(self) -> str:
        return self.step.attn

    def hidden_packing(self) -> str:
        """Why this model's forward never lets transformers find packed documents on its path, or ""."""
        if self._hidden_packing is None:
            from tuneproof.attention.packed_detection import packed_detection

            detection = packed_detection(self.shape.model_type)
            blind = detection.blind(self.attn) if detection is not None else ""
            self._hidden_packing = f"{blind}; {detection.fix()}" if blind and detection is not None else ""
        return self._hidden_packing


def read_run(model: Any, args: Any, gpu: str | None, peak_tflops: float | None) -> CallbackState:
    """The run of `model` (a PEFT model or a plain one) under the Trainer's `args`: read once as a `Run`
    (`tuneproof.runs.trainer.from_trainer`), its step at any width from `Run.step()`."""
    from tuneproof.arch import resolve
    from tuneproof.runs.trainer import from_trainer

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    resolved = resolve(base.config)
    run = from_trainer(model, args)
    notes = list(run.notes)
    attention = implementation(run.attn)
    if not attention.known:
        notes.append(f"{attention.note}: performed FLOPs, their MFU and the memory prediction are not logged")
    step = run.step()
    first = next(base.parameters())
    tflops, source = _peak(gpu, peak_tflops, first.dtype, first.device)
    card = CPU
    if first.device.type == "cuda":
        import torch

        card = of_capability(tuple(torch.cuda.get_device_capability(first.device)))  # type: ignore[arg-type]
    pad = getattr(base.config, "pad_token_id", None)
    eos = getattr(base.config, "eos_token_id", None)
    eos = eos[0] if isinstance(eos, list) and eos else eos
    return CallbackState(
        shape=resolved.shape,
        step=step,
        peak_tflops=tflops,
        peak_source=source,
        ledger=MicroBatchLedger(resolved.shape, step),
        card=card,
        dtype=run.dtype,  # the dispatch rules know bf16, fp16 and fp32: anything else is explained as fp32
        notes=notes,
        pad_id=pad if isinstance(pad, int) else None,
        eos_id=eos if isinstance(eos, int) else None,
        use_cache=bool(getattr(base.config, "use_cache", False)),
        dropout=resolved.attention_dropout,
        resolved=resolved,
    )


def _peak(gpu: str | None, given: float | None, dtype: Any, device: Any) -> tuple[float | None, str]:
    """(dense peak TFLOP/s, its source) for the device and dtype; None with the reason where the GPU
    table has none (no MFU is ever taken against a guessed peak)."""
    import torch

    if given is not None:
        return float(given), f"given: {given:g} TFLOP/s"
    # "auto" (or none given) is the device the model is on: its own name, not device 0's
    auto = not gpu or gpu.strip().lower() == "auto"
    name = (torch.cuda.get_device_name(device) if device.type == "cuda" else None) if auto else gpu
    if name is None:
        return None, f"no peak for a {device.type} device (pass gpu= or peak_tflops=)"
    from tuneproof.hardware.gpus import resolve_peak

    dtype_name = short_name(dtype) or str(dtype)  # an unknown one gets no peak, with its name
    try:
        peak = resolve_peak(name, dtype_name)
    except TuneproofError as e:
        return None, e.message
    if peak.tflops is None:
        return None, peak.reason or "the table has no peak for this device and dtype"
    return float(peak.tflops), peak.source or "GPU table"
