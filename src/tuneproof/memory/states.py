"""Bytes that live through the whole step: weights, gradients, optimizer states (issue 34's first part).

What each row counts, and where the rule comes from:
- weights: every GEMM weight the shape holds (experts' fused 3-D parameters whole, a shared block once)
  and the input embedding (vocab x hidden) unless tied to the LM head, at the model's dtype. Norm
  weights and biases are not in the shape (it holds GEMMs): they are named as not counted (at published
  sizes under 0.1 % of the weights; under 1 % on the test fixtures).
- LoRA adapters: r x (in + out) per adapted module at its rank (`Step.rank_of`, PEFT's
  rank_pattern), r x (in + out) per expert for a fused parameter PEFT adapts in place (A[E, in, r],
  B[E, r, out]), each module of modules_to_save copied whole. Adapters are fp32 whatever the base's
  dtype: PEFT upcasts them (`autocast_adapter_dtype=True`, peft/tuners/tuners_utils.py).
- gradients: one per trainable parameter, in its dtype (`param.grad` matches the parameter); LoRA trains
  the adapters (and modules_to_save), full fine-tuning every parameter, norms included.
- optimizer states (torch.optim, torch/optim/adamw.py and sgd.py): AdamW keeps exp_avg and exp_avg_sq
  in the parameter's dtype (`torch.zeros_like(p)`), plus a 4-byte `step` per parameter tensor (a
  float32 scalar, on the CPU unless `capturable` or `fused`: counted only where it lives on the device,
  here every parameter tensor when the device is the CPU); amsgrad a third moment. SGD with momentum
  keeps one buffer per parameter (cloned from the first gradient); plain SGD none.

The counts are checked against PyTorch's own MemTracker (`torch.distributed._tools.mem_tracker`,
categories Parameter, Gradient, Optstate) on tiny random models (tests/memory/test_states.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from tuneproof.arch.shape import Linear, ModelShape
from tuneproof.core.dtypes import BY_SHORT, check_dtype
from tuneproof.core.errors import TuneproofError
from tuneproof.runs.step import Step

FP32 = 4
STEP_BYTES = 4  # AdamW's float32 `step` scalar per parameter tensor
OPTIMIZERS = {
    # name: (state tensors per parameter, in the parameter's dtype; scalar step per parameter tensor)
    "adamw": (2, True),
    "adamw_amsgrad": (3, True),
    "sgd": (0, False),
    "sgd_momentum": (1, False),
    "adamw_8bit": (2, False),  # bitsandbytes: uint8 states, sized by EIGHT_BIT_STATE below
}
# bitsandbytes Optimizer2State.init_state (optim/optimizer.py): two uint8 states and an fp32 absmax per
# 256-element block for each (block-wise); parameters under min_8bit_size (4096 elements) keep fp32
# states: LoRA's A and B at published sizes are over it, a tiny model's may not be.
EIGHT_BIT_STATE = 1 + 4 / 256
# bitsandbytes weights as transformers 5.x loads them (integrations/bitsandbytes.py: only modules whose
# type is exactly nn.Linear, never the output embedding): bytes per weight, and per output row.
# 8bit: LLM.int8 int8 weight and an fp32 scale per row (SCB). 4bit: NF4 packed two per byte and an fp32
# absmax per 64-weight block; 4bit-dq (bnb_4bit_use_double_quant): the absmax itself in 8 bits with an
# fp32 scale per 256 blocks.
QUANT = {"8bit": (1.0, 4), "4bit": (0.5 + 4 / 64, 0), "4bit-dq": (0.5 + 1 / 64 + 4 / (64 * 256), 0)}
NOT_COUNTED = "norm weights and biases (the shape holds GEMMs and embeddings; under 0.1 % at published sizes)"
PER_LAYER_TABLES = "; per-layer embedding tables (Gemma 3n/4's embed_tokens_per_layer): not in the shape"


@dataclass(kw_only=True, frozen=True, slots=True)
class States:
    """Bytes per component that live through the step, and the parameter counts they come from."""

    weights: int
    adapters: int
    gradients: int
    optimizer: int
    trainable: int  # parameters that train
    tensors: int  # trainable parameter tensors (AdamW keeps a step scalar for each)
    not_counted: str = NOT_COUNTED

    @property
    def total(self) -> int:
        return self.weights + self.adapters + self.gradients + self.optimizer

    def to_dict(self) -> dict[str, object]:
        return {
            "weights": self.weights, "adapters": self.adapters, "gradients": self.gradients,
            "optimizer": self.optimizer, "total": self.total, "trainable_parameters": self.trainable,
            "trainable_tensors": self.tensors, "not_counted": self.not_counted,
        }  # fmt: skip


def state_bytes(
    shape: ModelShape,
    run: Step,
    dtype: str = "bf16",
    optimizer: str = "adamw",
    step_on_device: bool = False,
    quant: str | None = None,
    quant_experts: bool = False,
) -> States:
    """The weights, adapters, gradients and optimizer states of `run` on `shape` in `dtype`.
    `step_on_device`: AdamW's step scalars live on the device (capturable or fused AdamW; the CPU).
    `quant`: the base's nn.Linear weights loaded by bitsandbytes ("8bit", "4bit", "4bit-dq"; LoRA
    only: a quantised weight does not train); `quant_experts`: the fused experts too (Axolotl's
    quantize_moe_experts)."""
    if optimizer not in OPTIMIZERS:
        raise TuneproofError(
            f"optimizer {optimizer!r} is not one tuneproof sizes", f"use one of {', '.join(OPTIMIZERS)}"
        )
    size = BY_SHORT[check_dtype(dtype)].bytes
    _check_quant(quant, run)
    # the LM head is a GEMM of the shape; the input embedding is another table unless tied to it
    embedding = 0 if shape.tie_word_embeddings else shape.vocab_size * shape.hidden_size
    gemm = _gemm_parameters(shape)
    weights = (gemm + embedding) * size
    if quant is not None:
        per_weight, per_row = QUANT[quant]
        plain = [
            lin for lin in _unique_linears(shape)
            if (lin.num_experts == 1 or quant_experts) and lin is not shape.head
        ]  # fmt: skip
        params = sum(lin.in_features * lin.out_features * lin.num_experts for lin in plain)
        rows = sum(lin.out_features * lin.num_experts for lin in plain)
        weights -= params * size
        weights += round(params * per_weight) + rows * per_row
    if run.mode == "lora":
        adapters, whole, tensors = _adapters(shape, run)
        trainable = adapters + whole
        # adapters are fp32 (PEFT's upcast); modules_to_save keep the model's dtype
        trained = adapter_bytes = adapters * FP32 + whole * size
    else:
        trainable = gemm + embedding
        tensors = len(_unique_linears(shape)) + int(embedding > 0)  # each GEMM weight, the embedding
        trained, adapter_bytes = trainable * size, 0
    states, scalar = OPTIMIZERS[optimizer]
    if optimizer == "adamw_8bit":
        opt = round(states * EIGHT_BIT_STATE * trainable)
    else:
        opt = states * trained + (STEP_BYTES * tensors if scalar and step_on_device else 0)
    not_counted = NOT_COUNTED + (PER_LAYER_TABLES if shape.pre_steps else "")
    return States(
        weights=weights,
        adapters=adapter_bytes,
        gradients=trained,
        optimizer=opt,
        trainable=trainable,
        tensors=tensors,
        not_counted=not_counted,
    )


def _check_quant(quant: str | None, run: Step) -> None:
    if quant is None:
        return
    if quant not in QUANT:
        raise TuneproofError(
            f"quantisation {quant!r} is not one tuneproof sizes", f"use one of {', '.join(QUANT)}"
        )
    if run.mode != "lora":
        raise TuneproofError(
            f"{quant} weights with {run.mode} fine-tuning", "quantised weights do not train: use LoRA (QLoRA)"
        )


def _unique_linears(shape: ModelShape) -> list[Linear]:
    """Each GEMM weight once: a tied one (the LM head that is the embedding, a shared block's reuse)
    holds no weight of its own. Identical layers share Linear objects but not weights: each counts."""
    return [lin for lin in shape.linears if not lin.tied]


def _gemm_parameters(shape: ModelShape) -> int:
    return sum(lin.in_features * lin.out_features * lin.num_experts for lin in _unique_linears(shape))


def _adapters(shape: ModelShape, run: Step) -> tuple[int, int, int]:
    """(adapter parameters, parameters of modules_to_save, their tensors) as PEFT creates them, on what
    `tuneproof.arch.targets` resolves the step's LoRA to adapt."""
    from tuneproof.arch.targets import adaptation

    found = adaptation(shape, run.lora)
    adapters = whole = tensors = 0
    for layer, lin in shape.own_weights:
        place = found.place(layer, lin)
        if place.how == "whole":
            whole += lin.in_features * lin.out_features * lin.num_experts
            tensors += 1
        elif place.how == "parameter":
            adapters += lin.num_experts * place.rank * (lin.in_features + lin.out_features)
            tensors += 2
        elif place.how == "module":
            adapters += place.rank * (lin.in_features + lin.out_features)
            tensors += 2
    return adapters, whole, tensors
