"""Each decoder layer's token mixer, as data: softmax attention (full, sliding with its window,
chunked with its chunk, MLA's split head dims) or gated delta-rule linear attention, read from the
config's `layer_types` and the built attention module's own attributes.

Mixers tuneproof cannot cost yet are refused by name (`UNCOSTED`), never costed as another kind.

Sources (transformers 5.x): `layer_types` values and their mask functions in masking_utils
(LAYER_PATTERN_TO_MASK_FUNCTION_MAPPING: full_attention, sliding_attention, chunked_attention);
the delta rule in models/qwen3_next/modeling_qwen3_next.py `torch_chunk_gated_delta_rule`
(chunk_size=64) and `Qwen3NextGatedDeltaNet`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuneproof.arch.cca import CCA_ATTENTION, CcaConv, cca_core, cca_costs, cca_steps
from tuneproof.arch.indexer import INDEXED_TYPE, IndexScores, indexed_spec
from tuneproof.arch.kda import KDA_ELEMENTWISE, KDA_MIXERS, KimiDelta, kda_costs, read_kda
from tuneproof.arch.lightning import LIGHTNING_MIXERS, Lightning, lightning_costs, read_lightning
from tuneproof.arch.mlstm import MLSTM_MIXERS, MLstm, mlstm_core, mlstm_costs
from tuneproof.arch.prefixed import PREFIXED_ATTENTION, prefixed_spec
from tuneproof.arch.recurrent import (
    RGLRU_MIXERS,
    WKV_MIXERS,
    RgLru,
    Wkv,
    rglru_core,
    rglru_costs,
    rglru_steps,
    wkv_core,
    wkv_costs,
)
from tuneproof.arch.selective_scan import ELEMENTWISE, SCAN_MIXERS, WEIGHT_ONLY, SelectiveScan, scan_core
from tuneproof.arch.selective_scan import selective_scan_costs as _scan_costs
from tuneproof.arch.shape import Attention, AttentionSpec, Core, DeltaRule, Join, Op, StateSpace
from tuneproof.arch.shared_blocks import SHARED_BLOCK_LAYERS, shared_block_mixer
from tuneproof.arch.short_conv import (
    SHORT_CONV_MIXERS,
    DilatedConv,
    ShortConv,
    dilated_conv_costs,
    short_conv_core,
    short_conv_costs,
)
from tuneproof.core.errors import TuneproofError

# torch_chunk_gated_delta_rule(chunk_size=64): the chunk every transformers delta-rule layer uses
DELTA_CHUNK = 64

# Mixer modules (by class-name fragment) whose cost tuneproof does not model yet, with what they are.
UNCOSTED = {
    "Mamba": "a Mamba selective state-space mixer (other than Mamba-2 SSD)",
    "SSM": "a state-space mixer",
    "Rwkv": "an RWKV time mixer",
    "xLSTM": "an xLSTM mixer",
    "Lightning": "lightning linear attention",
    "RecurrentBlock": "a recurrent block",
}
# Attention modules that call the attention interface more than once per layer, each call a full
# softmax attention over all heads on the same q and k, by class name. Source: transformers
# models/diffllama/modeling_diffllama.py DiffLlamaAttention.forward (differential attention: two
# calls, on the two halves of V each repeated to all KV heads, then out1 - lambda * out2 per head
# pair). Both ledgers count both calls: each is a score map the model defines, and every path
# (eager, sdpa, flash, flex) runs its kernel twice, fused kernels recomputing QK^T in each backward.
ATTENTION_CALLS = {"DiffLlamaAttention": 2}
_SOFTMAX_TYPES = {"full_attention", "sliding_attention", "chunked_attention", "attention", None}
# Layer types that hold only a feed-forward block (its module may still be named `mixer`). Source:
# transformers models/nemotron_h/modeling_nemotron_h.py MIXER_TYPES ("mlp": NemotronHMLP, "moe":
# NemotronHMoE) and NemotronHBlock.forward (norm, that block, residual add).
FFN_ONLY_TYPES = frozenset({"mlp", "moe"})
NO_MIXER = AttentionSpec(kind="none", window=None, num_heads=0, num_kv_heads=0, head_dim=0, v_head_dim=0)


@dataclass(kw_only=True, frozen=True, slots=True)
class MixerKind:
    """One layer's mixer: its geometry (`spec`) and the core step between its projections."""

    spec: AttentionSpec
    delta: Core | None = None  # a linear-attention core in place of softmax attention
    # mixer children whose forward reads only their weight (Mamba-1's dt_proj): GEMMs LoRA never runs
    weight_only: frozenset[str] = frozenset()
    # the mixer's 2-D parameters used elementwise, no GEMM (Mamba-1's A_log)
    elementwise: frozenset[str] = frozenset()
    calls: int = 1  # softmax attention calls per layer on the same q, k (`ATTENTION_CALLS`)
    indexer: IndexScores | None = None  # a sparse-attention indexer's scores before the attention
    # a mixer whose dataflow is not projections -> core -> output projection builds its own steps
    # from its GEMM units, the layer's hidden size and its core (RG-LRU: `recurrent.rglru_steps`)
    program: Callable[[list[Any], int, Core], list[Op]] | None = None
    # a second mixer child and its core, run beside this one on the layer input (`PARALLEL_MIXERS`)
    side: tuple[str, Core] | None = None

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.spec, self.delta, self.calls, self.indexer, self.side)

    @property
    def ffn_only(self) -> bool:
        """The layer holds no token mixer, only a feed-forward or MoE block (`FFN_ONLY_TYPES`)."""
        return self.spec.kind == "none"

    def core_steps(self, q: str, k: str, v: str, dst: str) -> list[Op]:
        if self.delta is not None:
            from dataclasses import replace

            return [replace(self.delta, q=q, k=k, v=v, dst=dst)]
        if self.indexer is not None:
            return [self.indexer, Attention(q=q, k=k, v=v, dst=dst)]
        if self.calls == 1:
            return [Attention(q=q, k=k, v=v, dst=dst)]
        calls: list[Op] = [Attention(q=q, k=k, v=v, dst=f"{dst}.{i}") for i in range(self.calls)]
        return [*calls, Join(dst, tuple(f"{dst}.{i}" for i in range(self.calls)))]


def _get(obj: Any, name: str) -> Any:
    """An attribute, or None when absent (Gemma 4's per-layer fields raise when read globally)."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _int(*values: Any) -> int | None:
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def mixer_module(layer: Any) -> tuple[str, Any] | None:
    from tuneproof.arch.construct import MIXER_CHILD, is_gemm_module

    for name, child in layer.named_children():  # the first named like a mixer that holds a GEMM
        if MIXER_CHILD.search(name) and any(is_gemm_module(m) for m in child.modules()):
            return name, child
    return None


def layer_mixer(cfg: Any, index: int, layer: Any) -> MixerKind:
    """The mixer of decoder layer `index` (built module `layer`) of `cfg`."""
    types = _get(cfg, "layer_types")
    layer_type = types[index] if isinstance(types, list | tuple) and index < len(types) else None
    if layer_type in FFN_ONLY_TYPES:
        return MixerKind(spec=NO_MIXER)
    if type(layer).__name__ in PARALLEL_MIXERS:
        return _parallel_mixers(cfg, layer)
    if type(layer).__name__ in SHARED_BLOCK_LAYERS:  # Zamba2: a shared block, then a Mamba-2 layer
        spec, core = shared_block_mixer(cfg, layer)
        return MixerKind(spec=spec, delta=core)
    found = mixer_module(layer)
    if found is None:
        kind = f" (a {layer_type!r} layer)" if layer_type else ""
        raise TuneproofError(
            f"layer {index} of {cfg.model_type}{kind} has no attention module: tuneproof does not cost "
            "its mixer yet",
            "the costed families are listed in docs/families.md",
        )
    _, mod = found
    cls = type(mod).__name__
    if "GatedDeltaNet" in cls:
        return _delta(cfg, mod)
    if all(hasattr(mod, a) for a in _SSD_ATTRS) and cls in SSD_MIXERS:
        return ssd_spec(mod)
    if cls in SHORT_CONV_MIXERS:
        spec, core = short_conv_core(mod)
        return MixerKind(spec=spec, delta=core)
    if cls in CCA_ATTENTION:  # softmax attention on convolved q/k (ZAYA)
        return MixerKind(spec=softmax_spec(cfg, None, mod), delta=cca_core(mod), program=cca_steps)
    if cls in RGLRU_MIXERS:
        spec, core = rglru_core(mod)
        return MixerKind(spec=spec, delta=core, program=rglru_steps)
    if cls in WKV_MIXERS:
        spec, core = wkv_core(mod)
        return MixerKind(spec=spec, delta=core)
    if cls in MLSTM_MIXERS:
        spec, core = mlstm_core(mod)
        return MixerKind(spec=spec, delta=core)
    if cls in SCAN_MIXERS:
        spec, core = scan_core(mod)
        return MixerKind(spec=spec, delta=core, weight_only=WEIGHT_ONLY, elementwise=ELEMENTWISE)
    if cls in KDA_MIXERS:
        spec, core = read_kda(mod)
        return MixerKind(spec=spec, delta=core, elementwise=KDA_ELEMENTWISE)
    if cls in LIGHTNING_MIXERS:
        spec, core = read_lightning(mod)
        return MixerKind(spec=spec, delta=core)
    if cls in PREFIXED_ATTENTION:  # bidirectional over an in-model prefix (CPM-Ant)
        return MixerKind(spec=prefixed_spec(cfg, mod))
    if layer_type == INDEXED_TYPE:
        spec, indexer = indexed_spec(cfg, mod, softmax_spec(cfg, layer_type, mod))
        return MixerKind(spec=spec, indexer=indexer)
    for fragment, what in UNCOSTED.items():
        if fragment.lower() in cls.lower():
            raise TuneproofError(
                f"layer {index} of {cfg.model_type} is {what} ({cls}): tuneproof does not cost it yet",
                "the costed families are listed in docs/families.md",
            )
    if layer_type not in _SOFTMAX_TYPES:
        raise TuneproofError(
            f"layer {index} of {cfg.model_type} is a {layer_type!r} layer ({cls}): "
            "tuneproof does not cost it yet",
            "the costed families are listed in docs/families.md",
        )
    return MixerKind(spec=softmax_spec(cfg, layer_type, mod), calls=ATTENTION_CALLS.get(cls, 1))


def softmax_spec(cfg: Any, layer_type: str | None, mod: Any) -> AttentionSpec:
    heads = _int(_get(mod, "num_heads"), _get(mod, "num_attention_heads"), _get(cfg, "num_attention_heads"))
    assert heads is not None
    kv = _int(
        _get(mod, "num_key_value_heads"),
        _get(mod, "num_kv_heads"),
        _get(cfg, "num_key_value_heads"),
        heads,
    )
    head_dim = (
        _int(_get(mod, "qk_head_dim"), _get(mod, "head_dim"), _get(cfg, "head_dim"))
        or cfg.hidden_size // heads
    )
    v_dim = _int(_get(mod, "v_head_dim"), _get(mod, "head_dim")) or head_dim
    window, chunk, kind = None, None, "full"
    if layer_type == "sliding_attention":
        window = _int(_get(mod, "sliding_window"), _get(cfg, "sliding_window"))
    elif layer_type == "chunked_attention":
        chunk = _int(_get(cfg, "attention_chunk_size"))
        kind = "chunked" if chunk else "full"
    elif layer_type is None:
        window = _int(_get(mod, "sliding_window"))
    if window is not None:
        kind = "sliding"
    return AttentionSpec(
        kind=kind,
        window=window,
        num_heads=heads,
        num_kv_heads=kv or heads,
        head_dim=head_dim,
        v_head_dim=v_dim,
        chunk=chunk,
    )


def _delta(cfg: Any, mod: Any) -> MixerKind:
    heads = int(mod.num_v_heads)
    dk, dv = int(mod.head_k_dim), int(mod.head_v_dim)
    conv = mod.conv1d
    channels, taps = int(conv.weight.shape[0]), int(conv.weight.shape[-1])
    rule = DeltaRule(
        q="q",
        k="k",
        v="v",
        dst="attn",
        heads=heads,
        key_dim=dk,
        value_dim=dv,
        chunk=DELTA_CHUNK,
        conv_channels=channels,
        conv_kernel=taps,
    )
    spec = AttentionSpec(
        kind="linear",
        window=None,
        num_heads=heads,
        num_kv_heads=int(mod.num_k_heads),
        head_dim=dk,
        v_head_dim=dv,
        chunk=DELTA_CHUNK,
    )
    return MixerKind(spec=spec, delta=rule)


# Mixers that run transformers' `mamba2_chunk_scan` (models/mamba2/modeling_mamba2.py and its copies
# in bamba, granitemoehybrid, nemotron_h and zamba2), by class name: the SSD cost below is checked against
# FlopCounterMode on that function and on each family's tiny build.
SSD_MIXERS = frozenset(
    {"Mamba2Mixer", "BambaMixer", "GraniteMoeHybridMambaLayer", "NemotronHMamba2Mixer", "Zamba2MambaMixer"}
)
_SSD_ATTRS = ("num_heads", "head_dim", "ssm_state_size", "chunk_size", "n_groups", "conv1d")
# Decoder layers that run softmax attention and a Mamba-2 mixer side by side on the same normed
# input, the two outputs (each scaled by a constant) summed into one residual add, by class name.
# Source: transformers models/falcon_h1/modeling_falcon_h1.py FalconH1DecoderLayer.forward; its
# FalconH1Mixer runs the same mamba2_chunk_scan torch path (its multipliers are elementwise).
PARALLEL_MIXERS = frozenset({"FalconH1DecoderLayer"})
_SIDE_SSD_MIXERS = frozenset({"FalconH1Mixer"})


def _parallel_mixers(cfg: Any, layer: Any) -> MixerKind:
    """A `PARALLEL_MIXERS` layer: its attention child's geometry, its SSD child as the side core."""
    children = dict(layer.named_children())
    ssd = [n for n, m in children.items() if type(m).__name__ in _SIDE_SSD_MIXERS]
    attn = [n for n, m in children.items() if "attn" in n and n not in ssd]
    assert len(ssd) == 1 and len(attn) == 1, f"{type(layer).__name__}: children {list(children)}"
    core = ssd_spec(children[ssd[0]]).delta
    assert core is not None
    return MixerKind(spec=softmax_spec(cfg, None, children[attn[0]]), side=(ssd[0], core))


def ssd_spec(mod: Any) -> MixerKind:
    heads, p, n, chunk = int(mod.num_heads), int(mod.head_dim), int(mod.ssm_state_size), int(mod.chunk_size)
    channels, taps = int(mod.conv1d.weight.shape[0]), int(mod.conv1d.weight.shape[-1])
    core = StateSpace(
        q="q",
        k="k",
        v="v",
        dst="attn",
        heads=heads,
        head_dim=p,
        state=n,
        chunk=chunk,
        conv_channels=channels,
        conv_kernel=taps,
    )
    return MixerKind(
        spec=AttentionSpec(
            kind="linear",
            window=None,
            num_heads=heads,
            num_kv_heads=heads,
            head_dim=n,
            v_head_dim=p,
            chunk=chunk,
        ),
        delta=core,
    )


def ssd_flops(ssd: StateSpace, length: int) -> tuple[float, float]:
    """Forward FLOPs of one sequence through an SSD layer: (the chunked scan's einsums, the
    causal convolution). Per head, with c = ceil(T / chunk) chunks of L tokens, state n, head dim p:
    C.B^T and M.x inside each chunk (c x L^2 x (n + p)), each chunk's state and its read-out
    (2 x c x L x n x p), and the inter-chunk recurrence, which the torch path runs as one einsum over
    every pair of chunk boundaries ((c + 1)^2 x p x n: quadratic in the chunk count)."""
    if length <= 0:
        return 0.0, 0.0
    c, big_l, n, p = -(-length // ssd.chunk), ssd.chunk, ssd.state, ssd.head_dim
    per_head = 2.0 * c * big_l * big_l * (n + p) + 4.0 * c * big_l * n * p + 2.0 * (c + 1) ** 2 * p * n
    conv = 2.0 * ssd.conv_channels * ssd.conv_kernel * (length + ssd.conv_kernel - 1)
    return ssd.heads * per_head, conv


def mixer_flops(step: Core, length: int) -> tuple[float, float, float]:
    """(forward core, forward convolution, backward core) FLOPs of a mixer core on one sequence
    whose inputs need gradients, from the core's entry in CORE_COSTS. A core whose chunk, block or
    state is not positive is refused (the costs divide by the first two)."""
    for name in ("chunk", "block", "state"):
        value = getattr(step, name, 1)
        if not isinstance(value, int) or value < 1:
            raise TuneproofError(
                f"{type(step).__name__} mixer with {name} {value!r}",
                "fix the config field it comes from: it must be a positive integer",
            )
    return CORE_COSTS[type(step)](step, length)


def _delta_costs(rule: Any, length: int) -> tuple[float, float, float]:
    f, c = delta_rule_flops(rule, length)
    return f, c, delta_rule_backward(rule, length)


def _ssd_costs(ssd: Any, length: int) -> tuple[float, float, float]:
    f, c = ssd_flops(ssd, length)  # every einsum's two input gradients
    return f, c, 2.0 * f


# Each Core subclass's cost on one sequence: (forward core, forward convolution, backward core).
CORE_COSTS: dict[type, Callable[[Any, int], tuple[float, float, float]]] = {
    DeltaRule: _delta_costs,
    StateSpace: _ssd_costs,
    ShortConv: short_conv_costs,
    DilatedConv: dilated_conv_costs,
    CcaConv: cca_costs,
    SelectiveScan: _scan_costs,
    KimiDelta: kda_costs,
    Lightning: lightning_costs,
    RgLru: rglru_costs,
    Wkv: wkv_costs,
    MLstm: mlstm_costs,
}


def delta_rule_flops(rule: DeltaRule, length: int) -> tuple[float, float]:
    """Forward FLOPs of one sequence of `length` tokens through a delta-rule layer: (the chunked
    rule's matmuls, the causal convolution), padded to whole chunks as the torch kernel pads.

    Per head and chunk of C tokens (dk key, dv value dims): k_beta @ k^T and q @ k^T (C x C x dk each),
    the intra-chunk attention @ v_new (C x C x dv), and against the running state k_cumdecay @ S,
    q @ S, k^T @ v_new (C x dk x dv each). The two triangular solves (C^2 x (dk + dv) multiply-adds)
    are not matmuls and are left out, as FlopCounterMode leaves them out. The convolution is
    depthwise: conv_kernel taps per channel on T + conv_kernel - 1 output positions (the torch path
    pads both sides and slices)."""
    if length <= 0:
        return 0.0, 0.0
    c, dk, dv = rule.chunk, rule.key_dim, rule.value_dim
    chunks = -(-length // c)
    per_chunk = 2.0 * (2 * c * c * dk + c * c * dv + 3 * c * dk * dv)
    conv = 2.0 * rule.conv_channels * rule.conv_kernel * (length + rule.conv_kernel - 1)
    return rule.heads * chunks * per_chunk, conv


def delta_rule_backward(rule: DeltaRule, length: int) -> float:
    """Backward FLOPs of `delta_rule_flops`'s matmuls when its inputs need gradients (checked against
    FlopCounterMode on transformers' torch_chunk_gated_delta_rule): two input gradients per matmul;
    each triangular solve's backward adds one matmul for the system's gradient (C x C x dv and
    C x C x dk per chunk); the running state is zeros before the first chunk (its two matmuls need
    one gradient each) and the last chunk's state update feeds nothing (no backward at all)."""
    if length <= 0:
        return 0.0
    c, dk, dv = rule.chunk, rule.key_dim, rule.value_dim
    chunks = -(-length // c)
    forward, _ = delta_rule_flops(rule, length)
    solves = rule.heads * chunks * 2.0 * c * c * (dk + dv)
    state_mm = rule.heads * 2.0 * c * dk * dv
    return 2 * forward + solves - 4 * state_mm
