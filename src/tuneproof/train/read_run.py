"""The run as `TuneproofCallback` reads it from the model itself, at train begin: the shape from
`model.config`, and the step (`tuneproof.runs.step.RunSpec`, the one step type) from the model and the
Trainer's arguments: the LoRA rank, targets and target parameters (fused experts) from the PEFT
wrappers, activation checkpointing, the attention implementation in use; the dtype and device, and
the peak the MFUs are taken against. `CallbackState` holds that and what the callback has seen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuneproof.core.dtypes import LOW_PRECISION, short_name
from tuneproof.core.errors import TuneproofError
from tuneproof.flops.microbatch import MicroBatchLedger
from tuneproof.runs.step import RunSpec
from tuneproof.train.say import say


@dataclass(slots=True)
class CallbackState:
    shape: Any
    step: RunSpec  # the run's step at any width: attention path, mode, adapters, checkpointing
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

    @property
    def attn(self) -> str:
        return self.step.attn


def read_run(model: Any, args: Any, gpu: str | None, peak_tflops: float | None) -> CallbackState:
    """The run of `model` (a PEFT model or a plain one) under the Trainer's `args`."""
    from tuneproof.arch import resolve

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    resolved = resolve(base.config)
    rank, targets, parameters = _lora(model)
    trains = any(p.requires_grad for p in model.parameters())
    mode = "lora" if targets or parameters else ("full" if trains else "forward")
    attn = getattr(base.config, "_attn_implementation", None) or "eager"
    grad_ckpt = bool(_checkpointing(base) or getattr(args, "gradient_checkpointing", False))
    first = next(base.parameters())
    tflops, source = _peak(gpu, peak_tflops, first.dtype, first.device)
    step = RunSpec(
        seq_len=1, attn=attn, mode=mode, lora_rank=rank or 16, grad_ckpt=grad_ckpt,
        lora_targets=targets or (() if parameters else ("all-linear",)), lora_target_parameters=parameters,
    )  # fmt: skip
    ledger = MicroBatchLedger(resolved.shape, step)
    capability = None
    if first.device.type == "cuda":
        import torch

        capability = tuple(torch.cuda.get_device_capability(first.device))
    # the dispatch rules know bf16, fp16 and fp32: anything else is explained as fp32
    named = short_name(first.dtype)
    dtype_name = named if named in LOW_PRECISION else "fp32"
    return CallbackState(
        resolved.shape,
        step,
        tflops,
        source,
        ledger,
        capability=capability,  # type: ignore[arg-type]
        dtype=dtype_name,
    )


def _checkpointing(base: Any) -> bool:
    """transformers 5 names it is_activation_checkpointing (is_gradient_checkpointing warns)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(base), name):
            return bool(getattr(base, name))
    return False


def _lora(model: Any) -> tuple[int | None, tuple[str, ...], tuple[str, ...]]:
    """The adapters' rank, their nn.Linear targets and their target parameters (the fused expert
    parameters PEFT's ParamWrapper adapts in place), as paths inside a layer (`self_attn.q_proj`,
    `mlp.experts.gate_up_proj`)."""
    try:
        from peft.tuners.lora import LoraLayer, ParamWrapper
    except ImportError:
        return None, (), ()

    ranks: set[int] = set()
    targets: set[str] = set()
    parameters: set[str] = set()
    flat: set[str] = set()  # 2-D parameters wrapped by target_parameters: not in the ledger
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer) or not module.r:
            continue
        ranks.update(module.r.values())
        parts = name.split(".")
        if "layers" not in parts:
            continue
        i = parts.index("layers")
        path = ".".join(p for p in parts[i + 2 :] if p != "base_layer")
        if isinstance(module, ParamWrapper):
            param = f"{path}.{module.parameter_name}" if path else module.parameter_name
            (parameters if module.num_experts > 1 else flat).add(param)
        elif path:
            targets.add(path)
    if flat:
        say(
            f"tuneproof: LoRA on 2-D parameters through target_parameters ({', '.join(sorted(flat))}) is "
            "not in the FLOP ledger: the logged FLOPs leave out its GEMMs, so they undercount by that share"
        )
    if len(ranks) > 1:
        say(f"tuneproof: adapters of several ranks {sorted(ranks)}: FLOPs use the largest")
    return (max(ranks) if ranks else None), tuple(sorted(targets)), tuple(sorted(parameters))


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
