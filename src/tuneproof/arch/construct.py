"""Any decoder family's shape by construction: the model transformers builds from the config on the
meta device (no weights, no memory), read as a module tree.

What the tree gives, per decoder layer: every weight GEMM (`nn.Linear` and GPT-2's `Conv1D`, with
their shapes), fused 3-D expert parameters (their shapes give the experts and the per-expert
widths), routers (an `nn.Linear` or a raw 2-D weight beside the experts), shared experts, and the
attention module's own geometry (`num_heads`, `head_dim` / `qk_head_dim` / `v_head_dim`,
`sliding_window`). What the tree does not give comes from the config and stays as data in
`tuneproof.arch.mixers` (each layer's mixer kind and its cost) and in the tables below
(`PARALLEL_FAMILIES`, `DENSE_EXPERTS`, `TOP_K_FIELDS`), each with its source. A layer weight no
GEMM accounts for is refused (`_check_accounted`), never counted as nothing.

Identical layers are read once: layers whose module trees (names, classes, shapes) and mixer kind
match share one program.

The layer program built from these GEMMs (which node each reads and writes) is
`tuneproof.arch.program`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tuneproof.arch.indexer import no_grad_prefixes
from tuneproof.arch.inkling import INKLING_LAYERS, ffn_source, final_mix, inkling_layers, inkling_spec
from tuneproof.arch.mixers import MixerKind, layer_mixer
from tuneproof.arch.moa import EXPERTS_OUT_IN, is_moa, moa_steps
from tuneproof.arch.program import Unit, ffn_steps, mixer_steps, norm_gate_steps
from tuneproof.arch.qwen4_exp import QWEN4_EXP_LAYERS, qwen4_exp_program, stream_mix
from tuneproof.arch.recurrent import BLOCK_DIAGONAL, GATED_FFN
from tuneproof.arch.schedule import layer_schedule, stack_names, stack_size
from tuneproof.arch.shape import AttentionSpec, Join, LayerShape, Linear, ModelShape, Op
from tuneproof.arch.shared_blocks import SHARED_BLOCK_LAYERS, shared_block_program
from tuneproof.arch.sublayers import SUBLAYERED, layer_count, sublayer_program
from tuneproof.core.errors import TuneproofError

# Attention and feed-forward blocks run in parallel on the layer input (not one after the other) in
# these families, or when the named config flag is true. Sources: each modeling file's DecoderLayer
# forward (transformers 5.x): GPT-J, CodeGen, Cohere (and Cohere Compass's text decoder), Phi(-1/2),
# Falcon (parallel_attn), GPT-NeoX (use_parallel_residual), StableLM (use_parallel_residual),
# Persimmon is sequential.
PARALLEL_FAMILIES = frozenset(
    {"gptj", "codegen", "cohere", "cohere2", "phi", "cohere2_moe", "cohere_compass_text"}
)
PARALLEL_FLAGS = ("parallel_attn", "use_parallel_residual", "parallel_residual")

# Experts modules whose forward runs every token through every expert (a batched matmul over all
# experts, outputs weighted by router scores that are zero off the top-k), by class name. Source:
# transformers models/llama4/modeling_llama4.py Llama4TextExperts.forward (torch.bmm over all experts;
# Llama4TextMoe repeats the tokens once per expert). Modules that transformers' experts interface
# wraps (integrations/moe.py use_experts_implementation) run only the routed rows.
DENSE_EXPERTS = frozenset({"Llama4TextExperts"})

# Experts modules that store each weight as one 2-D parameter of E stacked (rows, cols) matrices, by
# class name -> the module attribute holding E; read as fused 3-D experts (E, rows, cols) with the same
# in/out rule. Source: transformers models/dbrx/modeling_dbrx.py DbrxExpertGLU (w1, v1, w2 of shape
# (E * ffn_hidden_size, hidden_size); x @ w1[e].T, x @ v1[e].T, then (gate * up) @ w2[e]) and
# DbrxExperts.forward (a loop over the hit experts, each running only its routed rows).
STACKED_EXPERTS = {"DbrxExpertGLU": "moe_num_experts"}

# Hyper-connection modules (hc_mult residual streams, mixed by weights computed from the streams), by
# class name -> their raw 2-D weight, read as a GEMM on the flattened streams that no adapter wraps.
# Source: transformers models/hy_v4/modeling_hy_v4.py HYV4HyperConnection.forward (F.linear(flat, fn):
# hc_mult x hidden in, 2 x hc_mult out; `post` then scales the block's output) and HYV4HyperHead.forward
# (hc_fn, hc_mult out: the streams collapsed before the final norm).
HYPER_CONNECTIONS = {"HYV4HyperConnection": "fn", "HYV4HyperHead": "hc_fn"}

# Config fields that hold the routed top-k, first match wins (the router module's own `top_k` is read
# first when it has one).
TOP_K_FIELDS = ("num_experts_per_tok", "top_k_experts", "moe_topk", "num_experts_per_token", "moe_k", "top_k")

MIXER_CHILD = re.compile(
    r"attn|attention|mixer|linear_attn|self_attention|token_mixer|mamba|^conv$|temporal_block|mlstm|^self_att$",
    re.IGNORECASE,
)


def meta_model(cfg: Any) -> Any:
    """The causal LM of a transformers config, on the meta device, eager attention and experts."""
    import copy
    import warnings

    import torch

    config = copy.deepcopy(cfg)
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            return causal_lm_from_config(config, attn_implementation="eager", experts_implementation="eager")
    except TypeError:  # a family without an experts_implementation switch
        with torch.device("meta"):
            return causal_lm_from_config(config, attn_implementation="eager")


def causal_lm_from_config(config: Any, **kwargs: Any) -> Any:
    """AutoModelForCausalLM.from_config, and for the families whose causal LM takes a text config
    the auto mapping does not list (emu3's Emu3ForCausalLM takes Emu3TextConfig, mllama's
    MllamaForCausalLM MllamaTextConfig) the mapped class whose config_class that config is."""
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    try:
        return AutoModelForCausalLM.from_config(config, **kwargs)
    except ValueError as e:
        if "Unrecognized configuration class" not in str(e):
            raise
        import transformers

        for name in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
            cls = getattr(transformers, name, None)
            if cls is not None and getattr(cls, "config_class", None) is type(config):
                return cls._from_config(config, **kwargs)
        raise


def decoder_layers(model: Any, num_layers: int) -> tuple[str, list[Any]]:
    """The decoder layers: the ModuleList of `num_layers` modules that holds the most GEMMs."""
    import torch.nn as nn

    best: tuple[int, str, list[Any]] | None = None
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList) and len(mod) == num_layers and num_layers:
            gemms = sum(1 for m in mod[0].modules() if is_gemm_module(m))
            if best is None or gemms > best[0]:
                best = (gemms, name, list(mod))
    if best is None or best[0] == 0:
        raise TuneproofError(
            f"{type(model).__name__} has no list of {num_layers} decoder layers holding weight GEMMs",
            "this model is not a decoder tuneproof can read; docs/families.md lists the costed families",
        )
    return best[1], best[2]


def is_gemm_module(m: Any) -> bool:
    import torch.nn as nn

    return isinstance(m, nn.Linear) or type(m).__name__ == "Conv1D"


def _units(layer: Any, hidden: int) -> list[Unit]:
    """The layer's weight GEMMs in registration order (the order their module defines them)."""
    import torch.nn as nn

    out: list[Unit] = []
    for name, mod in layer.named_modules():
        if isinstance(mod, nn.Linear):
            # a subclass that routes (Llama 4's Llama4Router returns a tuple): PEFT's all-linear wraps it
            # (isinstance), and lora.Linear then adds to the tuple, so the first forward fails
            routes = type(mod) is not nn.Linear and re.search(r"(router|gate)$", name) is not None
            out.append(
                Unit(
                    name=name,
                    in_features=mod.in_features,
                    out_features=mod.out_features,
                    kind="router" if routes else "linear",
                    wrap_fails=routes,
                )
            )
            continue
        if type(mod).__name__ == "Conv1D":  # GPT-2 style: weight (in, out)
            w = mod.weight
            out.append(
                Unit(name=name, in_features=int(w.shape[0]), out_features=int(w.shape[1]), kind="linear")
            )
            continue
        if isinstance(mod, nn.Embedding | nn.Conv1d | nn.LayerNorm):
            continue
        if (hc := HYPER_CONNECTIONS.get(type(mod).__name__)) is not None:
            w = getattr(mod, hc)
            out.append(
                Unit(
                    name=f"{name}.{hc}",
                    in_features=int(w.shape[1]),
                    out_features=int(w.shape[0]),
                    kind="router",
                )
            )
            continue
        params = [(n, p) for n, p in mod.named_parameters(recurse=False) if p.ndim in (2, 3)]
        params = [(n, p) for n, p in params if not _vector(p)]
        if type(mod).__name__ in BLOCK_DIAGONAL:  # (heads, in, out): each head's slice, every token
            for pname, p in params:
                if p.ndim == 3:
                    heads, a, b = (int(x) for x in p.shape)
                    out.append(
                        Unit(name=f"{name}.{pname}", in_features=heads * a, out_features=b, kind="block")
                    )
            continue
        experts = [(n, tuple(int(x) for x in p.shape)) for n, p in params if p.ndim == 3]
        stacked = STACKED_EXPERTS.get(type(mod).__name__)
        if stacked is not None:  # (E * rows, cols) read as E experts of (rows, cols)
            e = int(getattr(mod, stacked))
            experts = [(n, (e, int(p.shape[0]) // e, int(p.shape[1]))) for n, p in params]
        for i, (pname, (e, a, b)) in enumerate(experts):
            first = i < len(experts) - 1 or len(experts) == 1
            # F.linear(x, W[e]) stores (out, in); x @ W[e] stores (in, out): the hidden side tells
            if type(mod).__name__ in EXPERTS_OUT_IN:  # F.linear(x, W[e]) whatever the hidden side
                in_f, out_f = b, a
            elif first:
                in_f, out_f = (b, a) if b == hidden else (a, b)
            else:
                in_f, out_f = (a, b) if b == hidden else (b, a)
            dense = type(mod).__name__ in DENSE_EXPERTS
            out.append(
                Unit(
                    name=f"{name}.{pname}" if name else pname,
                    in_features=in_f,
                    out_features=out_f,
                    kind="experts",
                    num_experts=e,
                    dense=dense,
                )
            )
        for pname, p in params:
            if p.ndim == 2 and pname == "weight" and int(p.shape[1]) == hidden and not experts:
                out.append(Unit(name=name, in_features=hidden, out_features=int(p.shape[0]), kind="router"))
    frozen = no_grad_prefixes(layer)  # GEMMs that run forward only (a DSA indexer's)
    return [replace(u, no_grad=True) if u.name.startswith(frozen) else u for u in out]


def _vector(p: Any) -> bool:
    """A 3-D parameter with at most one dimension above 1 (RWKV's (1, 1, hidden) time-mix weights):
    a per-channel scale broadcast elementwise, not a stack of expert matrices. (A 2-D (1, hidden)
    weight can be a one-output GEMM, so it is never read as a vector.)"""
    return p.ndim == 3 and sum(int(d) > 1 for d in p.shape) <= 1


def _top_k(cfg: Any, layer: Any) -> int | None:
    for mod in layer.modules():
        for attr in ("top_k", "num_experts_per_tok"):
            v = getattr(mod, attr, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    for f in TOP_K_FIELDS:
        v = getattr(cfg, f, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _parallel(cfg: Any) -> bool:
    return cfg.model_type in PARALLEL_FAMILIES or any(bool(getattr(cfg, f, False)) for f in PARALLEL_FLAGS)


def _signature(layer: Any) -> tuple[Any, ...]:
    return tuple(
        (n, type(m).__name__, tuple((pn, tuple(p.shape)) for pn, p in m.named_parameters(recurse=False)))
        for n, m in layer.named_modules()
    )


def _shared_runs_last(layer: Any, shared: list[Unit]) -> bool:
    """Whether the MoE block calls its shared expert after its routed experts: read from the block's
    forward source (the order a module registers its children is not the order it runs them; Ernie
    4.5 and HunYuan call the shared expert first, DeepSeek and GLM-4-MoE last)."""
    import inspect

    block_name = shared[0].name.split(".")[0]
    shared_attr = shared[0].name.split(".")[1] if "." in shared[0].name else ""
    block = getattr(layer, block_name, None)
    if block is None:
        return True
    try:
        source = inspect.getsource(type(block).forward)
    except (OSError, TypeError):
        return True
    at_shared = source.find(f"self.{shared_attr}(")
    at_experts = source.find("self.experts(")
    return at_shared < 0 or at_experts < 0 or at_shared > at_experts


def _post_ffn_norm(layer: Any) -> bool:
    """A norm after the feed-forward block saves its output for backward (Gemma's
    post_feedforward_layernorm), so checkpointing's recompute re-runs the layer's last GEMM; so does
    a gate multiplying that GEMM's output (`recurrent.GATED_FFN`: RWKV's receptance * value)."""
    return any(
        re.search(r"post_(feedforward|mlp|ffn|moe)", n) or type(m).__name__ in GATED_FFN
        for n, m in layer.named_children()
    )


def read_constructed(cfg: Any, model_type: str) -> tuple[ModelShape, bool]:
    """The shape of `cfg`'s causal LM read from its meta-device module tree, and whether it has
    routed experts."""
    model = meta_model(cfg)
    hidden = int(cfg.hidden_size)
    prefixes, layers = _stacked_layers(model, cfg)
    parallel = _parallel(cfg)
    programs: dict[tuple[Any, ...], tuple[AttentionSpec, tuple[Op, ...], bool]] = {}
    shapes: list[LayerShape] = []
    variants: list[LayerShape] = []  # other programs of some layers (Inkling 2 Loop's first pass)
    for i, layer in enumerate(layers):
        if (own := _OWN_READERS.get(type(layer).__name__)) is not None:
            real, variant = own(cfg, i, layer, hidden)
            shapes.append(real)
            variants += [variant] if variant is not None else []
            continue
        mixer = layer_mixer(cfg, i, layer)
        use = i if type(layer).__name__ in SHARED_BLOCK_LAYERS else None  # each use runs its own adapters
        key = (_signature(layer), mixer.key, use)
        if key not in programs:
            programs[key] = _layer_program(cfg, layer, hidden, mixer, parallel, use)
        spec, steps, stops_early = programs[key]
        shapes.append(LayerShape(index=i, attention=spec, steps=steps, recompute_stops_early=stops_early))
    moe = any(isinstance(s, Linear) and s.num_experts > 1 for x in shapes for s in x.steps)
    head, pre, post = _model_level(model, prefixes, hidden, int(cfg.vocab_size))
    if any(INKLING_LAYERS.get(type(layer).__name__, (False,))[0] for layer in layers):
        post, head = final_mix(cfg, len(layers), head)  # Inkling 2's final block mix
    if any(type(layer).__name__ in QWEN4_EXP_LAYERS for layer in layers):
        post, head = stream_mix(post, head)  # Qwen4-Exp's final stream mix
    refused = _refused(model)
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    ckpt = bool(getattr(model, "supports_gradient_checkpointing", True))
    order = layer_schedule(cfg, len(shapes))
    shape = ModelShape(
        model_type=model_type, hidden_size=hidden, vocab_size=int(cfg.vocab_size), tie_word_embeddings=tied,
        layers=tuple(shapes), head=head, pre_steps=pre, attn_refused=refused, checkpointing=ckpt,
        post_steps=post, schedule=order.runs, run_reads=order.reads, no_grad_runs=order.no_grad,
        variants=tuple(variants), layers_path=prefixes[0],
    )  # fmt: skip
    return shape, moe


def _inkling_layer(cfg: Any, index: int, layer: Any, hidden: int) -> tuple[LayerShape, LayerShape | None]:
    """An `inkling.INKLING_LAYERS` layer (and its first-pass program, looped): its attention and
    convolutions read by that module, its MLP or MoE as any feed-forward block."""
    units = _units(layer, hidden)
    mlp = [u for u in units if u.name.startswith("mlp.")]
    experts = any(u.kind == "experts" for u in mlp)
    ffn = ffn_steps(mlp, hidden, _top_k(cfg, layer) if experts else None, ffn_source(layer))
    return inkling_layers(cfg, index, layer, units, ffn, inkling_spec(layer))


def _qwen4_exp_layer(cfg: Any, index: int, layer: Any, hidden: int) -> tuple[LayerShape, None]:
    """A `qwen4_exp.QWEN4_EXP_LAYERS` layer: its streams, PLE and QSA read by that module, a linear
    layer's delta rule and the MoE as in any layer."""
    units = _units(layer, hidden)
    mlp = [u for u in units if u.name.startswith("mlp.")]
    ffn = ffn_steps(mlp, hidden, _top_k(cfg, layer), "m.x")
    mixer = layer_mixer(cfg, index, layer) if hasattr(layer, "linear_attn") else None
    spec, steps, stops_early = qwen4_exp_program(cfg, layer, units, ffn, mixer)
    return LayerShape(index=index, attention=spec, steps=steps, recompute_stops_early=stops_early), None


# Layer classes whose family module builds the whole program, one per layer index (a layer's block
# states or streams are its own), by class name -> (the layer, another program its module runs).
_OWN_READERS: dict[str, Callable[[Any, int, Any, int], tuple[LayerShape, LayerShape | None]]] = {
    **{name: _inkling_layer for name in INKLING_LAYERS},
    **{name: _qwen4_exp_layer for name in QWEN4_EXP_LAYERS},
}


def _stacked_layers(model: Any, cfg: Any) -> tuple[tuple[str, ...], list[Any]]:
    """The decoder layers and the module names of the lists holding them: one list, or a hierarchical
    decoder's stacks one after the other (`schedule.HIERARCHICAL`)."""
    stacks, size = stack_names(cfg), stack_size(cfg)
    if stacks is None or size is None:
        prefix, one = decoder_layers(model, layer_count(cfg))
        return (prefix,), one
    prefixes: list[str] = []
    layers: list[Any] = []
    for stack in stacks:  # each stack module keeps its layers in `.layers`
        name = next(n for n, _ in model.named_modules() if n.rpartition(".")[2] == stack) + ".layers"
        prefixes.append(name)
        layers.extend(model.get_submodule(name))
    assert len(layers) == 2 * size, f"{cfg.model_type}: {len(layers)} layers in {prefixes}"
    return tuple(prefixes), layers


def _check_accounted(cfg: Any, layer: Any, units: list[Unit], mixer: MixerKind) -> None:
    """Refuse a layer holding a weight matrix the program does not cost (DBRX's experts stored as
    stacked 2-D parameters, Gemma 3n's AltUp coefficients): counted as nothing, it would be silently
    wrong. Accounted: the GEMM units' parameters, biases and other 1-D parameters (norms, scales,
    sinks), and the delta rule's convolution."""
    import torch.nn as nn

    covered = {u.name for u in units}
    for name, mod in layer.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            if p.ndim < 2 or _vector(p) or "bias" in pname:
                continue
            if name in covered or (f"{name}.{pname}" if name else pname) in covered:
                continue
            if isinstance(mod, nn.Conv1d) and (mixer.delta or mixer.side):  # a linear mixer's own conv
                continue
            if pname in mixer.elementwise:  # used elementwise by the mixer (Mamba-1's A_log)
                continue
            if isinstance(mod, nn.Embedding):
                continue
            raise TuneproofError(
                f"{cfg.model_type}: layer weight {name}.{pname} {tuple(p.shape)} ({type(mod).__name__}) "
                "is no GEMM tuneproof can cost",
                "this family is not costed yet; docs/families.md lists the costed ones",
            )


_NORM_CHILD = re.compile(r"norm", re.IGNORECASE)


def _gates(child: str, layer: Any) -> bool:
    """A layer child that gates the block after it: a norm holding GEMMs or a hyper-connection."""
    return bool(_NORM_CHILD.search(child)) or type(getattr(layer, child, None)).__name__ in HYPER_CONNECTIONS


def _norm_gates(layer: Any, units: list[Unit]) -> tuple[list[Unit], list[Unit]]:
    """GEMMs inside the layer's norm modules (a gated norm), split by where the layer's forward calls
    the norm: before its mixer (it gates the mixer's input) or after (the feed-forward block's)."""
    import inspect

    from tuneproof.arch.mixers import mixer_module

    found = mixer_module(layer)
    mixer = found[0] if found else None  # DBRX's norm_attn_norm is its mixer, no gated norm
    inside = [u for u in units if _gates((top := u.name.split(".")[0]), layer) and top != mixer]
    if not inside:
        return [], []
    source = inspect.getsource(type(layer).forward)
    at_mixer = source.find(f"self.{mixer}(")
    before = [u for u in inside if source.find(f"self.{u.name.split('.')[0]}(") < at_mixer]
    return before, [u for u in inside if u not in before]


def _with_norm_gates(steps: list[Op], before: list[Unit], after: list[Unit]) -> list[Op]:
    """The layer program with its gated norms' GEMMs on the layer input (before the mixer) and on the
    residual after the mixer ("mid", before the feed-forward block)."""
    if after:
        at = next(i for i, s in enumerate(steps) if isinstance(s, Join) and s.dst == "mid") + 1
        steps[at:at] = norm_gate_steps(after, "mid")
    return norm_gate_steps(before, "in") + steps


def _layer_program(
    cfg: Any, layer: Any, hidden: int, mixer: MixerKind, parallel: bool, use: int | None = None
) -> tuple[AttentionSpec, tuple[Op, ...], bool]:
    units = _units(layer, hidden)
    _check_accounted(cfg, layer, units, mixer)
    if type(layer).__name__ in SUBLAYERED:  # two attention and MLP sub-layers (LongCat-Flash)
        return sublayer_program(cfg, layer, units, hidden, _top_k(cfg, layer))
    gates = _norm_gates(layer, units)
    units = [u for u in units if not any(u in g for g in gates)]
    if use is not None and mixer.delta is not None:  # a shared block's use (Zamba2)
        return mixer.spec, tuple(shared_block_program(cfg, use, units, mixer.delta)), True
    mixer_units = [] if mixer.ffn_only else [u for u in units if MIXER_CHILD.search(u.name.split(".")[0])]
    ffn_units = [u for u in units if u not in mixer_units]
    spec = mixer.spec
    # a layer with no mixer: its feed-forward block reads the layer input
    if is_moa(layer):  # routed query and output projections (JetMoE)
        core = mixer.core_steps("mix.q", "mix.k", "mix.v", "attn")
        steps = moa_steps(mixer_units, hidden, _top_k(cfg, layer) or 1, core)
    else:
        steps = [Join("mid", ("in",))] if mixer.ffn_only else mixer_steps(mixer_units, hidden, spec, mixer)
    ffn_src = "in" if parallel else "mid"
    experts = any(u.kind == "experts" for u in ffn_units)
    steps += ffn_steps(ffn_units, hidden, _top_k(cfg, layer) if experts else None, ffn_src)
    steps = _with_norm_gates(steps, *gates)
    steps.append(Join("out", ("mid", "ffn")))
    # An MoE layer ends in the routing-weight multiply, which saves the experts' output, unless an
    # ungated shared expert runs after the experts and is added (DeepSeek, GLM-4-MoE, dots1): its
    # down projection is then the layer's last GEMM and nothing saves its output.
    shared = [u for u in ffn_units if "shared" in u.name]
    ungated_shared_last = (
        bool(shared) and not any(u.out_features == 1 for u in shared) and _shared_runs_last(layer, shared)
    )
    ends_in_gemm = not experts or ungated_shared_last
    stops_early = ends_in_gemm and not _post_ffn_norm(layer) and not parallel
    # a hyper-connection's `post` weights multiply the block's output, which saves it for backward
    stops_early = stops_early and not any(u.kind == "router" for u in gates[1])
    return spec, tuple(steps), stops_early


def _model_level(
    model: Any, prefixes: tuple[str, ...], hidden: int, vocab: int
) -> tuple[Linear, tuple[Op, ...], tuple[Op, ...]]:
    """The LM head (the model's own `get_output_embeddings()`) and the other GEMMs outside the decoder
    layers: those registered before the layers run once on the embeddings (Gemma 4's per-layer
    input projection), those after them run on the final hidden states before the head, in order
    (ModernBERT's prediction-head dense)."""
    head_module = model.get_output_embeddings()
    pre: list[Op] = []
    post: list[Op] = []
    head: Linear | None = None
    after_layers = False
    for name, mod in model.named_modules():
        if name.startswith(tuple(p + "." for p in prefixes)):
            after_layers = True
            continue
        if (hc := HYPER_CONNECTIONS.get(type(mod).__name__)) is not None and after_layers:
            w = getattr(mod, hc)
            src = post[-1].dst if post and isinstance(post[-1], Linear) else "model:final"
            hc_in, hc_out, dst = int(w.shape[1]), int(w.shape[0]), f"model:{name}"
            post.append(Linear(name=f"{name}.{hc}", in_features=hc_in, out_features=hc_out, src=src, dst=dst,
                               component="hyper_connection", adaptable=False))  # fmt: skip
            continue
        if not is_gemm_module(mod):
            continue
        w = mod.weight
        conv1d = type(mod).__name__ == "Conv1D"  # GPT-2's Conv1D stores (in, out)
        in_f, out_f = (int(w.shape[0]), int(w.shape[1])) if conv1d else (int(w.shape[1]), int(w.shape[0]))
        if mod is head_module:
            src = post[-1].dst if post and isinstance(post[-1], Linear) else "model:final"
            head = Linear(
                name="lm_head",
                in_features=in_f,
                out_features=out_f,
                src=src,
                dst="model:logits",
                component="lm_head",
                adaptable=False,
            )
        elif after_layers:
            src = post[-1].dst if post and isinstance(post[-1], Linear) else "model:final"
            post.append(Linear(name=name, in_features=in_f, out_features=out_f, src=src, dst=f"model:{name}",
                               component="model_proj"))  # fmt: skip
        else:
            pre.append(Linear(name=name, in_features=in_f, out_features=out_f, src="model:embed",
                              dst=f"model:{name}", component="model_proj"))  # fmt: skip
    if head is None:  # a head that is not a module (tied weight used functionally)
        src = post[-1].dst if post and isinstance(post[-1], Linear) else "model:final"
        head = Linear(
            name="lm_head",
            in_features=hidden,
            out_features=vocab,
            src=src,
            dst="model:logits",
            component="lm_head",
            adaptable=False,
        )
    return head, tuple(pre), tuple(post)


def _refused(model: Any) -> dict[str, str]:
    """Attention implementations the model class declares it does not support."""
    cls = type(model)
    flags = {
        "sdpa": "_supports_sdpa",
        "flash_attention_2": "_supports_flash_attn",
        "flex_attention": "_supports_flex_attn",
    }
    return {
        attn: f"{cls.__name__}.{flag} is False ({cls.__module__})"
        for attn, flag in flags.items()
        if getattr(cls, flag, True) is False
    }
