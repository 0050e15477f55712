"""Where in the step memory peaks, and how high: the step walked as autograd runs it.

The points (steady state: the optimizer's states exist from the first step on; `zero_grad` sets the
gradients to None, so a step starts with none unless micro-batches accumulate them):
- forward, at each layer: everything saved so far and the layer's own forward temporaries;
- the start of backward: every saved tensor and the loss's gradient (two fp32 B x T x V tensors, the
  log-softmax's gradient in and out);
- backward, at each layer (last first): what earlier layers saved, the gradients so far, the layer's
  backward temporaries; under activation checkpointing the layer's own saved tensors come back
  (recomputed) for its backward alone, and each layer otherwise keeps only its input;
- the optimizer step: weights, gradients, states, and the optimizer's temporaries (torch's AdamW:
  none when fused, a second copy of every exp_avg_sq for foreach, one parameter's for the
  single-tensor loop).
"""

from __future__ import annotations

from dataclasses import dataclass

from tuneproof.memory.activations import FP32, Geometry, Item, fused

# torch.optim.AdamW implementations (torch/optim/adamw.py `_fused_adamw`, `_multi_tensor_adamw`,
# `_single_tensor_adamw`): what each allocates beyond the states while it steps
OPTIMIZER_IMPLS = ("fused", "foreach", "for-loop")


@dataclass(frozen=True, slots=True)
class LayerCost:
    """One layer in the walk: what it saves, its parameters' gradient bytes, its temporaries."""

    index: int
    saved: tuple[Item, ...]
    gradients: int
    ffn_temp: int  # the feed-forward part's backward temporaries
    attn_temp: int  # the attention part's
    forward_temp: int
    checkpoint_input: int  # what the layer keeps under checkpointing: its input hidden states

    @property
    def saved_bytes(self) -> int:
        return sum(i.nbytes for i in self.saved)

    @property
    def attention_bytes(self) -> int:
        """What the attention part keeps: alive until the layer's backward ends."""
        return sum(i.nbytes for i in self.saved if i.half == "attn")


@dataclass(frozen=True, slots=True)
class StepPeak:
    """The highest point of the step, where it falls, and every point's height in step order."""

    peak_bytes: int
    where: str
    points: tuple[tuple[str, int], ...]


def backward_temps(
    layer_attention: object, g: Geometry, backend: str, widest: float, hidden: int, kept: int = 3
) -> tuple[int, int]:
    """The largest sets of tensors alive at once inside one layer's backward, (feed-forward part,
    attention part): the MLP's gradients of gate, up and activation; the attention's gradient of the
    probabilities and of the scores (eager/math, fp32 softmax), or the fused kernel's q, k, v
    gradients and its fp32 accumulator; each with the gradient flowing into the layer."""
    spec = layer_attention
    n, b = g.tokens, g.act_bytes
    attn = 0
    if getattr(spec, "softmax", False):
        h, hk, d = spec.num_heads, spec.num_kv_heads, spec.head_dim  # type: ignore[attr-defined]
        if fused(backend):
            attn = n * (h * d + 2 * hk * d) * b + n * h * d * FP32
        else:
            attn = 2 * g.batch * h * g.width * g.width * FP32
    flowing = n * hidden * b
    # the feed-forward part's backward: the gradients of its intermediate tensors (gate, up and the
    # activation: `kept` of them) once the down projection's input is freed, and the one flowing in
    return round((kept - 1) * n * widest * b) + flowing, attn + flowing


def walk(
    *,
    fixed: int,
    optimizer_states: int,
    gradients: int,
    head_gradients: int,
    last_gradients: int,
    layers: list[LayerCost],
    before: int,
    after: int,
    loss_temp: int,
    optimizer_temp: int,
    checkpointing: bool,
    accumulating: bool,
) -> StepPeak:
    """`fixed`: weights, buffers and adapters; `before`/`after`: what the model saves outside the
    layers (token ids, rotary tables; the final norm, the LM head input and the loss);
    `head_gradients`: made at the start of backward (the LM head's), `last_gradients` at its end (the
    input embedding's)."""
    base = fixed + optimizer_states
    carried = gradients if accumulating else 0
    kept = [(layer.checkpoint_input if checkpointing else layer.saved_bytes) for layer in layers]
    points: list[tuple[str, int]] = []
    acts = before
    for layer, keep in zip(layers, kept, strict=True):
        inside = layer.saved_bytes if checkpointing else 0
        points.append(
            (f"forward, layer {layer.index}", base + carried + acts + inside + keep + layer.forward_temp)
        )
        acts += keep
    acts += after
    points.append(("start of backward (the loss's gradient)", base + carried + acts + loss_temp))
    grads = head_gradients
    acts -= after
    for layer, keep in zip(reversed(layers), reversed(kept), strict=True):
        below = acts - (0 if checkpointing else keep)  # earlier layers' tensors, and under checkpointing
        # this layer's input; its own saved tensors (recomputed under checkpointing) are then freed
        # part by part: the feed-forward part's first
        held = base + max(carried, grads) + below
        points.append(
            (f"backward, layer {layer.index} feed-forward", held + layer.saved_bytes + layer.ffn_temp)
        )
        points.append(
            (f"backward, layer {layer.index} attention", held + layer.attention_bytes + layer.attn_temp)
        )
        acts -= keep
        grads += layer.gradients
    points.append(("optimizer step", base + max(carried, grads + last_gradients) + optimizer_temp))
    where, peak = max(points, key=lambda p: p[1])
    return StepPeak(peak, where, tuple(points))
