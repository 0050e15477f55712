"""Qwen4-Exp's decoder layers (qwen4_exp_text), read as one layer program each: hyper-connection
residual streams around every block, per-layer n-gram embeddings (PLE) on some layers, and QSA
indexed attention or the gated delta rule as the mixer.

What one layer runs (transformers 5.x models/qwen4_exp/modeling_qwen4_exp.py
`Qwen4ExpTextDecoderLayer.forward`; the residual is hc_count streams of the hidden size, one tensor
hc_count x hidden wide, `Qwen4ExpTextModel.forward` repeating the embeddings into them):
- `ple` (layers in ple_layer_ids; `Qwen4ExpTextPLELayer`): hashed n-gram embeddings of the ids (their
  own tables, trained in full fine-tuning only), key_proj (to every stream) and value_proj, an
  elementwise gate with the normed streams, then a dilated depthwise convolution over the streams
  (`DilatedConv`, T outputs), added to the residual;
- `attn_hyper_connection` (`Qwen4ExpTextGatedResidual`): input_mix_weight_down and _up mix the streams
  into the block's input, block_inject_weight gives each stream's injection weight;
- the mixer: `linear_attn`, the gated delta rule as Qwen3.5's (`mixers.mixer_steps`), or `self_attn`:
  the QSA indexer (`Qwen4ExpTextQSAIndexer`: index_qk_proj, then per query a matmul of its index heads
  with the mean-pooled keys of every whole block of indexer_compress_ratio keys it sees, `BlockScores`;
  its output is a selection mask, so no gradient reaches either), q_proj (queries and an output gate),
  k_proj, v_proj, attention (eager: the full square, the selection folded into the mask), o_proj on
  the gated output;
- the block's output injected into every stream, then `mlp_hyper_connection` and the MoE (router,
  routed experts, a gated shared expert) the same way.
After the last layer `hyper_connection_mixer` mixes the streams (down and up, no injection) for the
LM head.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tuneproof.arch.mixers import MixerKind
from tuneproof.arch.program import mixer_steps
from tuneproof.arch.shape import Attention, AttentionSpec, BlockScores, Join, Linear, Op
from tuneproof.arch.short_conv import DilatedConv
from tuneproof.core.errors import TuneproofError

if TYPE_CHECKING:
    from tuneproof.arch.program import Unit

# Decoder layer classes read by `qwen4_exp_program`, by class name.
QWEN4_EXP_LAYERS = frozenset({"Qwen4ExpTextDecoderLayer"})
_HC = ("input_mix_weight_down", "input_mix_weight_up", "block_inject_weight")


def qsa_spec(cfg: Any, attn: Any) -> AttentionSpec:
    """A QSA layer's geometry: causal attention over the keys its indexer keeps (block_indexed)."""
    heads, kv, head_dim = int(cfg.num_attention_heads), int(cfg.num_key_value_heads), int(attn.head_dim)
    return AttentionSpec(
        kind="block_indexed", window=None, num_heads=heads, num_kv_heads=kv, head_dim=head_dim,
        v_head_dim=head_dim, topk=int(cfg.indexer_budget), chunk=int(cfg.indexer_compress_ratio),
    )  # fmt: skip


def _lin(u: Unit, src: str, dst: str, component: str, **kw: Any) -> Linear:
    return Linear(
        name=u.name,
        in_features=u.in_features,
        out_features=u.out_features,
        src=src,
        dst=dst,
        component=component,
        **kw,
    )


def _streams(by_name: dict[str, Unit], owner: str, src: str, dst: str) -> list[Op]:
    """A gated residual's GEMMs on the streams `src`: the block input `dst`, the injection `dst`.w."""
    down, up, inject = (by_name.get(f"{owner}.{n}") for n in _HC)
    assert down is not None and up is not None
    steps: list[Op] = [
        _lin(down, src, f"{dst}.d", "hyper_connection"),
        _lin(up, f"{dst}.d", f"{dst}.u", "hyper_connection"),
        Join(dst, (src, f"{dst}.u")),
    ]
    if inject is not None:
        steps.append(_lin(inject, src, f"{dst}.w", "hyper_connection"))
    return steps


def _ple(by_name: dict[str, Unit], layer: Any) -> list[Op]:
    """The PLE layer on the streams "in": writes "x", the streams plus its output."""
    key, value = by_name["ple.key_proj"], by_name["ple.value_proj"]
    conv = layer.ple.conv1d
    channels, taps, dilation = int(conv.weight.shape[0]), int(conv.weight.shape[-1]), int(conv.dilation[0])
    core = DilatedConv(
        q="ple.g",
        k="ple.g",
        v="ple.g",
        dst="ple.c",
        conv_channels=channels,
        conv_kernel=taps,
        dilation=dilation,
    )
    return [
        _lin(key, "model:embed_per_layer", "ple.k", "ple"),
        _lin(value, "model:embed_per_layer", "ple.v", "ple"),
        Join("ple.g", ("in", "ple.k", "ple.v")),
        core,
        Join("x", ("in", "ple.g", "ple.c")),
    ]


def _qsa(by_name: dict[str, Unit], attn: Any) -> list[Op]:
    """QSA attention on the block input "a.x", writing "o"."""
    index = by_name["self_attn.indexer.index_qk_proj"]
    indexer = attn.indexer
    scores = BlockScores(
        q="idx",
        dst="idx.mask",
        heads=int(indexer.index_n_heads),
        head_dim=int(indexer.index_head_dim),
        block=int(indexer.compress_ratio),
    )
    steps: list[Op] = [
        _lin(index, "a.x", "idx", "attention.indexer_proj", no_grad=True),  # only a selection leaves it
        scores,
    ]
    for role in "qkv":
        steps.append(_lin(by_name[f"self_attn.{role}_proj"], "a.x", role, f"{role}_proj"))
    steps += [Attention(q="q", k="k", v="v", dst="attn"), Join("o.in", ("attn", "q"))]  # q_proj's gate half
    return [*steps, _lin(by_name["self_attn.o_proj"], "o.in", "o", "o_proj")]


def _renamed(steps: list[Op], node: str) -> list[Op]:
    """The mixer's steps reading `node` where they read the layer input."""

    def n(x: str) -> str:
        return node if x == "in" else x

    out: list[Op] = []
    for s in steps:
        if isinstance(s, Join):
            out.append(Join(s.dst, tuple(n(x) for x in s.srcs)))
        elif isinstance(s, Linear):
            out.append(replace(s, src=n(s.src)))
        else:
            out.append(s)
    return out


def qwen4_exp_program(
    cfg: Any, layer: Any, units: list[Unit], ffn: list[Op], mixer: MixerKind | None
) -> tuple[AttentionSpec, tuple[Op, ...], bool]:
    """One layer's program (module docstring); `ffn` is the MoE's program reading "m.x" and writing
    "ffn"; `mixer` the delta rule of a linear-attention layer (None: QSA). Checkpointing's recompute
    re-runs the whole layer: the MoE's output is multiplied by the injection weights, which saves it."""
    by_name = {u.name: u for u in units}
    hidden = int(cfg.hidden_size)
    steps: list[Op] = _ple(by_name, layer) if layer.ple is not None else [Join("x", ("in",))]
    steps += _streams(by_name, "attn_hyper_connection", "x", "a.x")
    if mixer is None:
        spec = qsa_spec(cfg, layer.self_attn)
        steps += _qsa(by_name, layer.self_attn)
    else:
        spec = mixer.spec
        mixing = [u for u in units if u.name.startswith("linear_attn.")]
        steps += _renamed(mixer_steps(mixing, hidden, spec, mixer)[:-1], "a.x")  # its "mid" join left out
    steps.append(Join("mid", ("x", "o", "a.x.w")))
    steps += _streams(by_name, "mlp_hyper_connection", "mid", "m.x")
    steps += ffn
    steps.append(Join("out", ("mid", "ffn", "m.x.w")))
    used = {s.name for s in steps if isinstance(s, Linear)}
    if missing := [u.name for u in units if u.name not in used]:
        raise TuneproofError(
            f"{cfg.model_type}: GEMMs {missing} have no place in its layer program",
            "this family's layer changed: it is not costed until its program is updated",
        )
    return spec, tuple(steps), False


def stream_mix(post: tuple[Op, ...], head: Linear) -> tuple[tuple[Op, ...], Linear]:
    """`hyper_connection_mixer` after the last layer: its down and up projections (the model-level GEMMs
    after the layers, `construct._model_level`) and the streams they mix, read by the LM head."""
    last = post[-1]
    assert isinstance(last, Linear) and head.src == last.dst, (post, head)
    return (*post, Join("model:mixed", ("model:final", last.dst))), replace(head, src="model:mixed")
