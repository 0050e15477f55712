"""Inkling's decoder layers (inkling_text, inkling2_text, inkling2_loop_text), read as one layer
program each: short convolutions after the k and v projections, after the attention and after the
feed-forward block, and a relative-position bank feeding the scores; Inkling 2 adds block attention
residuals, sinks and a gated output projection; Inkling 2 Loop runs a section of its layers again,
with messages from the pass before.

What one Inkling layer runs (transformers 5.x models/inkling/modeling_inkling.py
`InklingDecoderLayer.forward`, `InklingAttention.forward`): a norm; q_proj; k_proj and v_proj each
followed by a short convolution (`k_sconv`, `v_sconv`: a depthwise F.conv1d, `ShortConv`); r_proj,
then `relative_states @ rel_logits_proj.proj` (each head's d_rel states times the shared (d_rel,
rel_extent) bank: a GEMM on heads rows per token) gathered into a bias added to the scores; the
scores and the mix (eager: the full square of each row); o_proj; `attn_sconv`; the residual; a norm;
the MLP (gate, up, down) or the MoE (`mlp.gate`: F.linear with its raw weight over the routed and
shared experts; the routed experts; `shared_experts`: torch.bmm of every token with each of its
n_shared_experts 3-D weights); `mlp_sconv`; the residual.

What one Inkling 2 layer runs (models/inkling2/modeling_inkling2.py, `Inkling2SlidingDecoderLayer` and
`Inkling2FullDecoderLayer.forward`; i is the layer index, N = n_layers_per_attn_res_block):
- the block states: `Inkling2TextModel.forward` appends the input of every layer j with j % N == 0
  (a block boundary) to `block_states` after that layer runs; layer i sees those of the boundaries
  before it;
- `attention_input` (layers after the first; `Inkling2BlockAttentionResidual`): learned queries (1 on a
  sliding layer, 3 on a full one: the q, k and v inputs) attend, per token, over the block states and
  the layer input (`BlockMix`); input norms;
- attention: q_proj.linear; k_proj and v_proj each a linear then a short convolution (sliding: a
  depthwise F.conv1d; full: taps from `sconv.weight_proj` on the layer's k (v) input, applied as an
  elementwise product and sum, no matmul); `relative_position_bias` (its linear, then the bank as
  above); `sink_proj`: one logit per head and token, concatenated to the scores before the softmax;
  the scores and the mix; `o_proj`: the output times sigmoid(gate_proj(input)), then its linear;
- `post_attention_convolution`; the residual: a block boundary starts from the convolution's output
  alone (and its input joins the block states), any other layer adds the layer input;
- `mlp_input` (one learned query over the block states and that residual), a norm, the MoE (router
  and routed experts as above, no shared experts), `post_mlp_convolution`, the residual.
After the last layer `final_input` (one learned query over all block states and the last output).

Inkling 2 Loop (models/inkling2_loop/modeling_inkling2_loop.py `Inkling2LoopTextModel.forward`) runs its
layers loop_layer_index_start to loop_layer_index_end - 1 loop_num_passes times (`schedule.PASSES`).
The first pass runs them as Inkling 2 layers (`ModelShape.variants`, weights tied); each later pass
restarts from the pre-loop hidden and block states, and before each looped layer the model (outside
the layer's checkpoint) retrieves 4 messages (`message_input`: 4 learned queries over the previous
pass's block states but its first, and its output); the layer gates its q, k, v inputs after the
block mix and its MLP input with them (`Inkling2LoopMessageGate`: down_proj on both, then the forget
and message gates' projections).

The bias and the sinks reach the scores without a matmul (`Attention.bias`); everything else
(norms, clips, log scales, gathers, the dynamic taps) is elementwise.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tuneproof.arch.schedule import PASSES
from tuneproof.arch.shape import Attention, AttentionSpec, BlockMix, Join, LayerShape, Linear, Op
from tuneproof.arch.short_conv import ShortConv
from tuneproof.core.errors import TuneproofError

if TYPE_CHECKING:
    from tuneproof.arch.program import Unit

# Decoder layer classes read by `inkling_layers`, by class name -> (block attention residuals around
# the blocks: Inkling 2; a full-attention Inkling 2 layer: three learned queries, dynamic k/v convolutions).
INKLING_LAYERS = {
    "InklingDecoderLayer": (False, False),
    "Inkling2SlidingDecoderLayer": (True, False),
    "Inkling2FullDecoderLayer": (True, True),
    "Inkling2LoopSlidingDecoderLayer": (True, False),
    "Inkling2LoopFullDecoderLayer": (True, True),
    "Inkling2LoopSlidingLoopDecoderLayer": (True, False),
    "Inkling2LoopFullLoopDecoderLayer": (True, True),
}
# the layers of Inkling 2 Loop's looped section, which gate their inputs with the previous pass's messages
_LOOPED = frozenset({"Inkling2LoopSlidingLoopDecoderLayer", "Inkling2LoopFullLoopDecoderLayer"})
_GATES = ("q_message_gate", "k_message_gate", "v_message_gate", "mlp_message_gate")
_ATTN = "self_attn"


def boundaries(cfg: Any, before: int) -> list[int]:
    """The block-boundary layers before layer `before`: their inputs are its block states."""
    every = int(cfg.n_layers_per_attn_res_block)
    return [j for j in range(before) if j % every == 0]


def _mix(states: list[str], src: str, dst: str, queries: int, hidden: int) -> list[Op]:
    """A block attention residual: `queries` learned queries over the `states` and `src`."""
    kv = f"{dst}.kv"
    return [
        Join(kv, (*states, src)),
        BlockMix(src=kv, dst=dst, queries=queries, blocks=len(states) + 1, width=hidden),
    ]


def _linear(by_name: dict[str, Unit], name: str, src: str, dst: str, component: str) -> Linear:
    u = by_name[f"{_ATTN}.{name}"]
    return Linear(
        name=u.name,
        in_features=u.in_features,
        out_features=u.out_features,
        src=src,
        dst=dst,
        component=component,
    )


def _kv(by_name: dict[str, Unit], role: str, src: str, conv: ShortConv | None) -> list[Op]:
    """k_proj or v_proj: the linear, then its short convolution (static: a depthwise conv; dynamic:
    taps projected from the same input by `sconv.weight_proj`, applied elementwise)."""
    steps: list[Op] = [_linear(by_name, f"{role}_proj.linear", src, f"{role}.lin", f"{role}_proj")]
    if conv is not None:
        return [*steps, replace(conv, q=f"{role}.lin", k=f"{role}.lin", v=f"{role}.lin", dst=role)]
    taps = _linear(by_name, f"{role}_proj.sconv.weight_proj", src, f"{role}.taps", "attention.proj")
    return [*steps, taps, Join(role, (f"{role}.lin", f"{role}.taps"))]


def _attention(
    by_name: dict[str, Unit], layer: Any, spec: AttentionSpec, srcs: tuple[str, str, str], conv: int | None
) -> list[Op]:
    """The attention module on its q, k and v inputs; writes "o"."""
    q_in, k_in, v_in = srcs
    steps: list[Op] = [_linear(by_name, "q_proj.linear", q_in, "q", "q_proj")]
    static = (
        None
        if conv is None
        else ShortConv(
            q="", k="", v="", dst="", conv_channels=spec.num_kv_heads * spec.head_dim, conv_kernel=conv
        )
    )
    steps += _kv(by_name, "k", k_in, static) + _kv(by_name, "v", v_in, static)
    steps.append(_linear(by_name, "relative_position_bias.linear", q_in, "rel.s", "attention.proj"))
    rel = layer.self_attn.relative_position_bias
    steps.append(_bank(rel, "relative_position_bias", "rel.s", spec.num_heads))
    steps.append(_linear(by_name, "sink_proj", q_in, "sink", "attention.proj"))
    steps.append(Attention(q="q", k="k", v="v", dst="attn", bias=("rel.b", "sink")))
    steps.append(_linear(by_name, "o_proj.gate_proj", q_in, "o.gate", "attention.proj"))
    steps.append(Join("o.in", ("attn", "o.gate")))
    steps.append(_linear(by_name, "o_proj.linear", "o.in", "o", "o_proj"))
    return steps


def _conv(layer: Any, name: str, src: str, dst: str) -> ShortConv:
    weight = getattr(layer, name).conv1d.weight  # (H, 1, K): depthwise
    return ShortConv(
        q=src, k=src, v=src, dst=dst, conv_channels=int(weight.shape[0]), conv_kernel=int(weight.shape[-1])
    )


def ffn_source(layer: Any) -> str:
    """The node the feed-forward block reads: the MLP's block mix, message-gated in a loop pass after
    the first (Inkling 2), or the residual."""
    return "mlp.x" if INKLING_LAYERS[type(layer).__name__][0] else "mid"


def inkling_layers(
    cfg: Any, index: int, layer: Any, units: list[Unit], ffn: list[Op], spec: AttentionSpec
) -> tuple[LayerShape, LayerShape | None]:
    """Layer `index`'s program (module docstring), and for a looped layer of Inkling 2 Loop the program
    its module runs on the first pass, before any message (its weights tied to the layer's); `ffn` is
    the feed-forward block's program reading `ffn_source(layer)` and writing "ffn". Checkpointing's
    recompute stops before the layer's last op, its closing convolution: the tensors it saves (its
    input, its weight) are saved before it runs (`LayerShape`)."""
    blocks, _ = INKLING_LAYERS[type(layer).__name__]
    by_name = {u.name: u for u in units}
    looped = type(layer).__name__ in _LOOPED
    if not blocks:
        steps = _inkling(cfg, index, layer, by_name, ffn, spec)
    else:
        steps = _inkling2(cfg, index, layer, by_name, ffn, spec, looped) + _snapshot(cfg, index)
    used = {s.name for s in steps if isinstance(s, Linear)}
    if missing := [u.name for u in units if u.name not in used]:
        raise TuneproofError(
            f"{cfg.model_type} layer {index}: GEMMs {missing} have no place in its program",
            "this family's layer changed: it is not costed until its program is updated",
        )
    if not looped:
        return LayerShape(index=index, attention=spec, steps=tuple(steps), recompute_stops_early=True), None
    states = [f"model:loop.b{j}" for j in _message_blocks(cfg)]
    messages = tuple(_mix(states, "model:loop.out", "msg", len(_GATES), int(cfg.hidden_size)))
    first = _inkling2(cfg, index, layer, by_name, ffn, spec, False) + _snapshot(cfg, index)
    tied = tuple(replace(s, tied=True) if isinstance(s, Linear) else s for s in first)
    real = LayerShape(
        index=index, attention=spec, steps=tuple(steps), recompute_stops_early=True, outside=messages
    )
    return real, LayerShape(index=index, attention=spec, steps=tied, recompute_stops_early=True)


def _section(cfg: Any) -> tuple[int, int]:
    """Inkling 2 Loop's looped layers: start and end (`schedule.PASSES`)."""
    rule = PASSES[cfg.model_type]
    return int(getattr(cfg, rule.start)), int(getattr(cfg, rule.end))


def _message_blocks(cfg: Any) -> list[int]:
    """The looped section's block boundaries whose inputs the next pass's messages read: all but the
    first (`block_states[..., num_pre_loop_blocks + 1 :, :]`)."""
    start, end = _section(cfg)
    return [j for j in boundaries(cfg, end) if j >= start][1:]


def _snapshot(cfg: Any, index: int) -> list[Op]:
    """After the looped section's last layer: what the next pass's messages read (the section's block
    states but its first, and its output), kept apart from the next pass's own."""
    if cfg.model_type not in PASSES or index != _section(cfg)[1] - 1:
        return []
    blocks = (Join(f"model:loop.b{j}", (f"L{j}:in",)) for j in _message_blocks(cfg))
    return [*blocks, Join("model:loop.out", ("out",))]


def _gate(by_name: dict[str, Unit], gate: str, src: str, dst: str) -> list[Op]:
    """A message gate (`Inkling2LoopMessageGate`): down_proj on [norm(src), norm(message)], then the
    forget and message gates' projections, mixed elementwise with src and the message."""
    steps: list[Op] = [Join(f"{dst}.cat", (src, "msg"))]
    for name, reads in (
        ("down_proj", f"{dst}.cat"),
        ("forget_gate_proj", f"{dst}.d"),
        ("message_gate_proj", f"{dst}.d"),
    ):
        u = by_name[f"{gate}.{name}"]
        steps.append(
            Linear(
                name=u.name,
                in_features=u.in_features,
                out_features=u.out_features,
                src=reads,
                dst=f"{dst}.{name[0]}",
                component="message_gate",
            )
        )
    return [*steps, Join(dst, (src, "msg", f"{dst}.f", f"{dst}.m"))]


def _bank(rel: Any, owner: str, src: str, heads: int) -> Linear:
    """`relative_states @ proj`: each head's d_rel states times the shared bank, heads rows per token."""
    d_rel, extent = (int(x) for x in rel.proj.shape)
    name, rows = f"{_ATTN}.{owner}.proj", float(heads)
    bank = "attention.rel_bias"
    return Linear(
        name=name,
        in_features=d_rel,
        out_features=extent,
        src=src,
        dst="rel.b",
        component=bank,
        tokens_per_token=rows,
        adaptable=False,
    )


def _inkling(
    cfg: Any, index: int, layer: Any, by_name: dict[str, Unit], ffn: list[Op], spec: AttentionSpec
) -> list[Op]:
    attn = layer.self_attn
    steps: list[Op] = [_linear(by_name, "q_proj", "in", "q", "q_proj")]
    for role in "kv":
        steps.append(_linear(by_name, f"{role}_proj", "in", f"{role}.lin", f"{role}_proj"))
        steps.append(_conv(attn, f"{role}_sconv", f"{role}.lin", role))
    steps.append(_linear(by_name, "r_proj", "in", "rel.s", "attention.proj"))
    steps.append(_bank(attn.rel_logits_proj, "rel_logits_proj", "rel.s", spec.num_heads))
    steps.append(Attention(q="q", k="k", v="v", dst="attn", bias=("rel.b",)))
    steps.append(_linear(by_name, "o_proj", "attn", "o", "o_proj"))
    steps.append(_conv(layer, "attn_sconv", "o", "o.conv"))
    steps.append(Join("mid", ("in", "o.conv")))
    shared = int(getattr(cfg, "n_shared_experts", 0) or 0)
    every = float(shared)  # the shared experts run every token through each of them (torch.bmm)
    steps += [
        replace(s, tokens_per_token=every) if isinstance(s, Linear) and ".shared_experts." in s.name else s
        for s in ffn
    ]
    steps.append(_conv(layer, "mlp_sconv", "ffn", "ffn.conv"))
    steps.append(Join("out", ("mid", "ffn.conv")))
    return steps


def _inkling2(
    cfg: Any,
    index: int,
    layer: Any,
    by_name: dict[str, Unit],
    ffn: list[Op],
    spec: AttentionSpec,
    messages: bool = False,
) -> list[Op]:
    """An Inkling 2 layer; with `messages`, its q, k, v and MLP inputs gated by the "msg" node."""
    _, full = INKLING_LAYERS[type(layer).__name__]
    hidden = int(cfg.hidden_size)
    states = [f"L{j}:in" for j in boundaries(cfg, index)]
    steps: list[Op] = []
    src = "in"
    if index > 0:
        steps += _mix(states, "in", "a.in", 3 if full else 1, hidden)
        src = "a.in"
    srcs = (src, src, src)
    if messages:
        for role, gate in zip("qkv", _GATES, strict=False):
            steps += _gate(by_name, gate, src, f"{role}.in")
        srcs = ("q.in", "k.in", "v.in")
    conv = None if full else int(cfg.conv_kernel_size)
    steps += _attention(by_name, layer, spec, srcs, conv)
    steps.append(_conv(layer, "post_attention_convolution", "o", "o.conv"))
    boundary = index % int(cfg.n_layers_per_attn_res_block) == 0
    steps.append(Join("mid", ("o.conv",) if boundary else ("in", "o.conv")))
    steps += _mix([*states, "in"] if boundary else states, "mid", "mlp.in", 1, hidden)
    steps += _gate(by_name, _GATES[3], "mlp.in", "mlp.x") if messages else [Join("mlp.x", ("mlp.in",))]
    steps += ffn
    steps.append(_conv(layer, "post_mlp_convolution", "ffn", "ffn.conv"))
    steps.append(Join("out", ("mid", "ffn.conv")))
    return steps


def inkling_spec(layer: Any) -> AttentionSpec:
    """The attention geometry of an `INKLING_LAYERS` layer: its module's heads and widths, the
    sliding window on a sliding layer (eager computes the full square either way)."""
    attn = layer.self_attn
    heads, kv, head_dim = int(attn.num_heads), int(attn.num_key_value_heads), int(attn.head_dim)
    window = attn.sliding_window
    return AttentionSpec(
        kind="full" if window is None else "sliding", window=None if window is None else int(window),
        num_heads=heads, num_kv_heads=kv, head_dim=head_dim, v_head_dim=head_dim,
    )  # fmt: skip


def final_mix(cfg: Any, num_layers: int, head: Linear) -> tuple[tuple[Op, ...], Linear]:
    """`final_input` after the last layer: one learned query over every block state and the last
    layer's output, read by the final norm and the LM head."""
    states = [f"L{j}:in" for j in boundaries(cfg, num_layers)]
    mix = _mix(states, "model:final", "model:final_input", 1, int(cfg.hidden_size))
    return tuple(mix), replace(head, src="model:final_input")
