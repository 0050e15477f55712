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


@dataclass(kw_only=True, frozen=True, slots=True)
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


@dataclass(kw_only=True, frozen=True, slots=True)
class Point:
    """One moment of the step and what is alive then."""

    where: str
    fixed: int  # weights, adapters, buffers, and what a data-parallel wrapper keeps
    optimizer_states: int
    gradients: int
    activations: int  # saved for backward (recomputed ones included)
    temporaries: int  # made and freed inside the moment's op

    @property
    def total(self) -> int:
        return self.fixed + self.optimizer_states + self.gradients + self.activations + self.temporaries

    def to_dict(self) -> dict[str, object]:
        return {
            "where": self.where, "total": self.total, "weights_and_adapters": self.fixed,
            "optimizer_states": self.optimizer_states, "gradients": self.gradients,
            "activations": self.activations, "temporaries": self.temporaries,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class StepPeak:
    """The highest point of the step and every point in step order."""

    points: tuple[Point, ...]

    @property
    def top(self) -> Point:
        return max(self.points, key=lambda p: p.total)

    @property
    def peak_bytes(self) -> int:
        return self.top.total

    @property
    def where(self) -> str:
        return self.top.where


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
    carried = gradients if accumulating else 0
    kept = [(layer.checkpoint_input if checkpointing else layer.saved_bytes) for layer in layers]
    points: list[Point] = []

    def at(where: str, grads: int, acts: int, temp: int) -> None:
        points.append(
            Point(
                where=where,
                fixed=fixed,
                optimizer_states=optimizer_states,
                gradients=grads,
                activations=acts,
                temporaries=temp,
            )
        )

    acts = before
    for layer, keep in zip(layers, kept, strict=True):
        inside = layer.saved_bytes if checkpointing else 0
        at(f"forward, layer {layer.index}", carried, acts + inside + keep, layer.forward_temp)
        acts += keep
    at("start of backward (the loss's gradient)", carried, acts + after, loss_temp)
    grads = head_gradients
    for layer, keep in zip(reversed(layers), reversed(kept), strict=True):
        below = acts - (0 if checkpointing else keep)  # earlier layers' tensors, and under checkpointing
        # this layer's input; its own saved tensors (recomputed under checkpointing) are then freed
        # part by part: the feed-forward part's first
        held = max(carried, grads)
        at(f"backward, layer {layer.index} feed-forward", held, below + layer.saved_bytes, layer.ffn_temp)
        at(f"backward, layer {layer.index} attention", held, below + layer.attention_bytes, layer.attn_temp)
        acts -= keep
        grads += layer.gradients
    at("optimizer step", max(carried, grads + last_gradients), 0, optimizer_temp)
    return StepPeak(tuple(points))
