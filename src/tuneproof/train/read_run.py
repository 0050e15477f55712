"""The run as `TuneproofCallback` reads it from the model itself, at train begin: the shape from
`model.config`, and the step (`tuneproof.runs.step.RunSpec`, the one step type) from the model and the
Trainer's arguments: the LoRA rank, targets and target parameters (fused experts) from the PEFT
wrappers, activation checkpointing, the attention implementation in use; the dtype and device, and
the peak the MFUs are taken against. `CallbackState` holds that and what the callback has seen."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tuneproof.core.dtypes import LOW_PRECISION, short_name
from tuneproof.core.errors import TuneproofError
from tuneproof.flops.microbatch import MicroBatchLedger
from tuneproof.runs.step import RunSpec


@dataclass(kw_only=True, slots=True)
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
    """The run of `model` (a PEFT model or a plain one) under the Trainer's `args`."""
    from tuneproof.arch import resolve

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    resolved = resolve(base.config)
    notes: list[str] = []
    adapters = _lora(model, notes)
    targets, parameters = adapters.targets, adapters.parameters
    trains = any(p.requires_grad for p in model.parameters())
    mode = "lora" if targets or parameters else ("full" if trains else "forward")
    attn = getattr(base.config, "_attn_implementation", None) or "eager"
    grad_ckpt = bool(_checkpointing(base) or getattr(args, "gradient_checkpointing", False))
    first = next(base.parameters())
    tflops, source = _peak(gpu, peak_tflops, first.dtype, first.device)
    step = RunSpec(
        seq_len=1, attn=attn, mode=mode, lora_rank=adapters.rank or 16, grad_ckpt=grad_ckpt,
        lora_targets=targets or (() if parameters else ("all-linear",)), lora_target_parameters=parameters,
        lora_ranks=adapters.ranks if mode == "lora" else (),
        lora_modules_to_save=adapters.saved if mode == "lora" else (),
        compiled=_compiled(model, args),
    )  # fmt: skip
    ledger = MicroBatchLedger(resolved.shape, step)
    capability = None
    if first.device.type == "cuda":
        import torch

        capability = tuple(torch.cuda.get_device_capability(first.device))
    # the dispatch rules know bf16, fp16 and fp32: anything else is explained as fp32
    named = short_name(first.dtype)
    dtype_name = named if named in LOW_PRECISION else "fp32"
    pad = getattr(base.config, "pad_token_id", None)
    eos = getattr(base.config, "eos_token_id", None)
    eos = eos[0] if isinstance(eos, list) and eos else eos
    return CallbackState(
        shape=resolved.shape,
        step=step,
        peak_tflops=tflops,
        peak_source=source,
        ledger=ledger,
        capability=capability,  # type: ignore[arg-type]
        dtype=dtype_name,
        notes=notes,
        pad_id=pad if isinstance(pad, int) else None,
        eos_id=eos if isinstance(eos, int) else None,
        use_cache=bool(getattr(base.config, "use_cache", False)),
        dropout=resolved.attention_dropout,
        resolved=resolved,
    )


def _compiled(model: Any, args: Any) -> bool:
    """The Trainer compiles the model (`torch_compile=True`), or it arrived compiled: transformers then
    builds a mask for every SDPA layer (attention.paths MASK_SOURCES["compiled"])."""
    if getattr(args, "torch_compile", False):
        return True
    return any(hasattr(m, "_orig_mod") for m in (model, getattr(model, "base_model", None)) if m is not None)


def _checkpointing(base: Any) -> bool:
    """transformers 5 names it is_activation_checkpointing (is_gradient_checkpointing warns)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(base), name):
            return bool(getattr(base, name))
    return False


class Adapters(NamedTuple):
    """The adapters a PEFT model really holds, as paths inside a layer: the most common rank, the
    nn.Linear targets, the target parameters (fused experts, 2-D weights such as a router's), the
    paths whose rank differs from the common one, and the modules saved whole (modules_to_save)."""

    rank: int | None
    targets: tuple[str, ...]
    parameters: tuple[str, ...]
    ranks: tuple[tuple[str, int], ...] = ()
    saved: tuple[str, ...] = ()


def _lora(model: Any, notes: list[str] | None = None) -> Adapters:
    """Walk the wrapped model: every LoRA module PEFT created (never the requested pattern: PEFT's
    all-linear on a MoE adds expert and router target_parameters, its rank_pattern other ranks), each
    with its active adapter's rank, and PEFT's ModulesToSaveWrapper copies."""
    try:
        from peft.tuners.lora import LoraLayer, ParamWrapper
        from peft.utils import ModulesToSaveWrapper
    except ImportError:
        return Adapters(None, (), ())

    found: dict[str, set[int]] = {}  # path inside a layer (or outside: lm_head) -> ranks seen
    targets: set[str] = set()
    parameters: set[str] = set()
    saved: set[str] = set()
    for name, module in model.named_modules():
        if isinstance(module, ModulesToSaveWrapper):
            saved.add(_inside_layer(name) or name.rpartition(".")[2])
            continue
        if not isinstance(module, LoraLayer) or not module.r:
            continue
        active = [a for a in _active(module) if module.r.get(a)]
        path = _inside_layer(name)
        if not active or not path:
            continue
        if isinstance(module, ParamWrapper):
            path = f"{path}.{module.parameter_name}" if path else module.parameter_name
            parameters.add(path)
        else:
            targets.add(path)
        found.setdefault(path, set()).update(module.r[a] for a in active)
    if not found:
        return Adapters(None, (), (), (), tuple(sorted(saved)))
    per_path = {path: max(r) for path, r in found.items()}
    counts = Counter(per_path.values())
    rank = max(counts, key=lambda r: (counts[r], r))
    uneven = sorted(path for path, r in found.items() if len(r) > 1)
    if uneven and notes is not None:
        notes.append(
            f"adapters of several ranks at the same place in different layers ({', '.join(uneven)}): FLOPs "
            "use the largest there"
        )
    ranks = tuple(sorted((path, r) for path, r in per_path.items() if r != rank))
    return Adapters(rank, tuple(sorted(targets)), tuple(sorted(parameters)), ranks, tuple(sorted(saved)))


def _inside_layer(name: str) -> str:
    """A module's path inside its decoder layer (`self_attn.q_proj`), PEFT's wrappers left out; a
    module outside the layers (lm_head, embed_tokens) by its last name; "" for the model itself."""
    parts = [p for p in name.split(".") if p not in ("base_layer", "modules_to_save", "original_module")]
    if "layers" in parts:
        i = parts.index("layers")
        return ".".join(parts[i + 2 :])
    return parts[-1] if parts and parts[-1] not in ("model", "base_model") else ""


def _active(module: Any) -> list[str]:
    active = getattr(module, "active_adapters", None) or getattr(module, "active_adapter", None)
    return [active] if isinstance(active, str) else list(active or module.r)


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
