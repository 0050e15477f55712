"""The shape of a decoder-only transformer, as the FLOP ledger needs it.

A layer is a short program over named activations ("nodes"): weight GEMMs (`Linear`), the
attention core (`Attention`) and residual/elementwise merges (`Join`). The ledger walks the program
once per pass; the node graph is what tells it which backward GEMMs autograd really runs (a frozen
weight gets no weight-gradient GEMM, an input that needs no gradient gets no input-gradient GEMM).

Node names are local to a layer ("in", "q", "attn", ...) unless they start with "model:" (a
model-level activation such as the embeddings) or "L<j>:" (another layer's node, used by Gemma 4's
KV sharing). Every layer reads "in" and writes "out".
"""

from __future__ import annotations

from dataclasses import dataclass, field

# full: causal over all earlier keys; sliding: a window of earlier keys; chunked: causal inside fixed
# chunks of the sequence; linear: a linear-attention mixer (gated delta rule) with no score matrix;
# none: no token mixer at all (a layer holding only a feed-forward or MoE block, as Nemotron-H's do);
# indexed: causal attention over the `topk` keys a learned indexer picks per query (DeepSeek Sparse
# Attention); bidirectional: every query sees every key of its row, `prefix` tokens the model prepends
# included (CPM-Ant's own attention, `tuneproof.arch.prefixed`); block_indexed: causal attention over
# the keys an indexer picks per query in whole blocks of `chunk` tokens, `topk` // `chunk` blocks plus
# the query's partial block (Qwen4-Exp's QSA, `tuneproof.arch.qwen4_exp`).
KINDS = ("full", "sliding", "chunked", "linear", "none", "indexed", "bidirectional", "block_indexed")


@dataclass(kw_only=True, frozen=True, slots=True)
class AttentionSpec:
    """One attention layer's geometry. `window` is None for full (global) attention.

    Window convention (transformers `sliding_window_overlay`): query q sees keys k with
    q - window < k <= q, i.e. itself and window-1 earlier tokens.
    """

    kind: str  # one of KINDS
    window: int | None
    num_heads: int
    num_kv_heads: int
    head_dim: int  # query/key head dim
    v_head_dim: int
    chunk: int | None = None  # chunked layers: queries see keys of their own chunk only (Llama 4)
    topk: int | None = None  # indexed layers: keys the indexer picks per query (index_topk)
    prefix: int = 0  # tokens the model prepends to each row inside its forward (bidirectional layers)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"AttentionSpec.kind must be one of {KINDS}, got {self.kind!r}")
        if (self.kind == "sliding") != (self.window is not None):
            raise ValueError("AttentionSpec.window must be set exactly for sliding layers")
        if (self.kind in ("chunked", "linear", "block_indexed")) != (self.chunk is not None):
            raise ValueError("AttentionSpec.chunk must be set exactly for chunked, linear, block_indexed")
        if (self.kind in ("indexed", "block_indexed")) != (self.topk is not None):
            raise ValueError("AttentionSpec.topk must be set exactly for indexed and block_indexed layers")
        if self.prefix and self.kind != "bidirectional":
            raise ValueError("AttentionSpec.prefix is only for bidirectional layers")

    @property
    def softmax(self) -> bool:
        """A softmax attention layer (scores over pairs); linear-attention layers have none."""
        return self.kind not in ("linear", "none")

    @property
    def locality(self) -> int | None:
        """The window or chunk that bounds which keys a query sees (None: all earlier keys)."""
        return self.window if self.window is not None else (self.chunk if self.kind == "chunked" else None)

    @property
    def label(self) -> str:
        """Short group name: layers with equal labels have equal attention cost."""
        win = f" w={self.window}" if self.window is not None else ""
        win += f" chunk={self.chunk}" if self.chunk is not None else ""
        win += f" topk={self.topk}" if self.topk is not None else ""
        win += f" prefix={self.prefix}" if self.prefix else ""
        return f"{self.kind}{win} h={self.num_heads} d={self.head_dim}"


@dataclass(kw_only=True, frozen=True, slots=True)
class Linear:
    """A weight GEMM y[n, out] = x[n, in] @ W[in, out], run on `tokens_per_token` x n rows.

    `tokens_per_token` is top_k for routed experts (each token visits k experts) and 1 otherwise.
    `adaptable` is True for `nn.Linear` modules (what PEFT's target_modules can wrap) and False for
    fused 3-D expert parameters and raw router weights.
    """

    name: str  # module path relative to the layer (or the model), e.g. "self_attn.q_proj"
    in_features: int
    out_features: int
    src: str
    dst: str
    component: str  # ledger row: "q_proj", "k_proj", "v_proj", "o_proj", "mlp", "experts", ...
    tokens_per_token: float = 1.0
    adaptable: bool = True
    num_experts: int = 1  # weight copies stored (routed experts); compute uses tokens_per_token
    dense: bool = False  # experts that run every token through every expert (weighted by the router)
    # runs under torch.no_grad (a sparse-attention indexer's projections): forward only, even in
    # training; its output needs no gradient and LoRA on it gets none
    no_grad: bool = False
    # its weight is another layer's (Zamba2's shared block, reused): FLOPs run here, parameters there
    tied: bool = False
    # an nn.Linear subclass that returns more than a tensor (Llama 4's and PhiMoE's routers): PEFT's
    # all-linear wraps it, and the wrapped module's first forward fails (`tuneproof.arch.targets`)
    wrap_fails: bool = False


@dataclass(kw_only=True, frozen=True, slots=True)
class Attention:
    """The attention core: scores = q k^T (QK^T) and out = softmax(scores) v (AV). `bias`: nodes added
    to the scores or the softmax without a matmul (a position bias, per-token sinks): their gradient
    needs the probabilities' gradient (dO @ V^T), not dQ or dK."""

    q: str
    k: str
    v: str
    dst: str
    bias: tuple[str, ...] = ()


@dataclass(kw_only=True, frozen=True, slots=True)
class Core:
    """A mixer core in place of softmax attention (linear attention, a state-space scan, ...): reads
    nodes q, k, v and writes dst. Each subclass's cost on one sequence is registered in
    `tuneproof.arch.mixers.CORE_COSTS`; the ledger walks every core the same way."""

    q: str
    k: str
    v: str
    dst: str


@dataclass(kw_only=True, frozen=True, slots=True)
class DeltaRule(Core):
    """Gated delta-rule linear attention (Qwen3-Next, Qwen3.5) in its chunked form, as transformers'
    `torch_chunk_gated_delta_rule` computes it: the sequence is cut into chunks of `chunk` tokens
    (padded up to a whole chunk), each head keeps a (key_dim x value_dim) state; before it a
    depthwise causal convolution of `conv_kernel` taps runs over `conv_channels` channels.
    Cost is linear in T (see `tuneproof.arch.mixers.delta_rule_flops`)."""

    heads: int
    key_dim: int
    value_dim: int
    chunk: int
    conv_channels: int
    conv_kernel: int


@dataclass(kw_only=True, frozen=True, slots=True)
class StateSpace(Core):
    """Mamba-2's state-space dual (SSD) mixer in its chunked form, as transformers'
    `mamba2_chunk_scan` torch path computes it: chunks of `chunk` tokens, `heads` heads of
    `head_dim` channels and a `state`-wide state; a depthwise causal convolution before it. Reads
    one node (the input projection) as `q`, `k` and `v` alike (`tuneproof.arch.mixers.ssd_flops`)."""

    heads: int
    head_dim: int
    state: int
    chunk: int
    conv_channels: int
    conv_kernel: int


@dataclass(kw_only=True, frozen=True, slots=True)
class IndexScores:
    """A sparse-attention indexer's scores (DeepSeek Sparse Attention), run under torch.no_grad:
    per index head q . k over (query, key) pairs, then a weighted sum over the heads; forward only.
    Cost: `tuneproof.arch.indexer.index_score_flops`."""

    q: str
    k: str
    dst: str
    heads: int
    head_dim: int


@dataclass(kw_only=True, frozen=True, slots=True)
class BlockScores:
    """A block indexer's scores (Qwen4-Exp's QSA, `tuneproof.arch.qwen4_exp`): each query's `heads` index
    heads of `head_dim` against the mean-pooled keys of every whole block of `block` tokens it sees,
    a matmul per query; no gradient reaches it (its output is a selection). Reads `q`."""

    q: str
    dst: str
    heads: int
    head_dim: int
    block: int


@dataclass(kw_only=True, frozen=True, slots=True)
class BlockMix:
    """Learned queries attending over each token's stacked residual states (Inkling 2's block attention
    residual, `tuneproof.arch.inkling`): per token, `queries` query vectors (a parameter, trained
    in full fine-tuning only) score the `blocks` states of `width` channels read from `src` and mix
    them: two matmuls of 2 x queries x blocks x width FLOPs per token, as attention's QK^T and AV."""

    src: str
    dst: str
    queries: int
    blocks: int
    width: int


@dataclass(frozen=True, slots=True)
class Join:
    """dst depends on every src (residual add, gating, normalisation): no matmul FLOPs."""

    dst: str
    srcs: tuple[str, ...]


Op = Linear | Attention | Core | IndexScores | BlockScores | BlockMix | Join


@dataclass(kw_only=True, frozen=True, slots=True)
class LayerShape:
    """One decoder layer.

    `recompute_stops_early`: under non-reentrant activation checkpointing (transformers' default)
    the recompute stops once the last tensor saved for backward is re-saved, and autograd saves an
    op's inputs before running it. When the layer ends in a GEMM whose output no later op saves
    (llama-style: down_proj, then only a residual add), that GEMM is not re-run (under LoRA: the
    adapter's lora_B GEMM is the last saver instead). When the layer ends in a convolution (Inkling 2's
    post_mlp_convolution: it saves its own input), that convolution is not re-run.
    """

    index: int
    attention: AttentionSpec
    steps: tuple[Op, ...]
    recompute_stops_early: bool = False
    # steps the model runs before calling this layer's module, outside its checkpoint (never recomputed):
    # Inkling 2 Loop's message retrieval
    outside: tuple[Op, ...] = ()


@dataclass(kw_only=True, frozen=True, slots=True)
class ModelShape:
    """A whole model. `pre_steps` run once before the layers (e.g. Gemma 4's per-layer input
    projection, reading "model:embed"); `head` is the LM head reading "model:final"; `attn_refused`
    maps an attention implementation transformers will not run for this model to the reason."""

    model_type: str
    hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool
    layers: tuple[LayerShape, ...]
    head: Linear
    pre_steps: tuple[Op, ...] = field(default=())
    # attention implementations transformers refuses for this model, with the reason
    attn_refused: dict[str, str] = field(default_factory=dict)
    # False: the model class does not support gradient checkpointing (supports_gradient_checkpointing)
    checkpointing: bool = True
    # GEMMs after the last layer and before the head (ModernBERT's prediction head dense), reading
    # "model:final"; the head then reads the last one's output
    post_steps: tuple[Op, ...] = field(default=())
    # positions in `layers` in the order the model runs them, when a layer runs more than once (a
    # looped decoder's middle section, `tuneproof.arch.schedule`); () runs each layer once in order
    schedule: tuple[int, ...] = field(default=())
    # per schedule position, the nodes whose sum the run reads when it is not the previous run's output
    # (HRM: a stack's first layer reads both stacks' states); () for all: each run reads the one before
    run_reads: tuple[tuple[str, ...], ...] = field(default=())
    # schedule positions run under torch.no_grad (HRM's early low cycles): forward only, no gradient out
    no_grad_runs: frozenset[int] = field(default_factory=frozenset)

    # other programs of some layers' modules (same index, tied weights), which `schedule` reaches at
    # positions len(layers) + i: a looped section whose first pass runs its modules otherwise (Inkling 2
    # Loop's first pass, before any message exists)
    variants: tuple[LayerShape, ...] = field(default=())
    # the decoder layers' module path in the model transformers builds (`model.layers.{i}` holds layer i):
    # PEFT matches target_modules on full paths
    layers_path: str = "model.layers"

    @property
    def prefix_tokens(self) -> int:
        """Tokens the model prepends to each row inside its forward (CPM-Ant's prompt): every layer
        runs on them, the LM head does not."""
        return max((layer.attention.prefix for layer in self.layers), default=0)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def runs(self) -> tuple[LayerShape, ...]:
        """The layers in the order one forward runs them: the ledger walks this, parameters and
        attention groups read `layers` (each module once)."""
        every = self.layers + self.variants
        return tuple(every[i] for i in self.schedule) if self.schedule else self.layers

    @property
    def attention_groups(self) -> dict[str, list[int]]:
        """Softmax-attention layer indices per distinct attention geometry, in first-seen order
        (linear-attention layers have no pairs and no mask: `mixer_groups` lists them)."""
        groups: dict[str, list[int]] = {}
        for layer in self.layers:
            if layer.attention.softmax:
                groups.setdefault(layer.attention.label, []).append(layer.index)
        return groups

    @property
    def mixer_groups(self) -> dict[str, list[int]]:
        """Linear-attention layer indices per geometry (layers with no mixer are in neither list)."""
        groups: dict[str, list[int]] = {}
        for layer in self.layers:
            if layer.attention.kind == "linear":
                groups.setdefault(layer.attention.label, []).append(layer.index)
        return groups

    @property
    def has_experts(self) -> bool:
        """Some layer holds routed experts (fused 3-D expert parameters)."""
        return any(lin.num_experts > 1 for lin in self.linears)

    @property
    def own_weights(self) -> list[tuple[int | None, Linear]]:
        """Every GEMM that holds a weight of its own, with its layer index (None outside the layers): the
        layers' programs, not their other programs (a looped section's variants reuse those weights), and
        no tied weight (the LM head that is the embedding, a shared block's reuse)."""
        out: list[tuple[int | None, Linear]] = [(None, s) for s in self.pre_steps if isinstance(s, Linear)]
        for layer in self.layers:
            out.extend((layer.index, s) for s in layer.steps if isinstance(s, Linear))
        out.extend((None, s) for s in self.post_steps if isinstance(s, Linear))
        out.append((None, self.head))
        return [(i, lin) for i, lin in out if not lin.tied]

    @property
    def linears(self) -> list[Linear]:
        out = [s for s in self.pre_steps if isinstance(s, Linear)]
        for layer in self.layers:
            out.extend(s for s in layer.steps if isinstance(s, Linear))
        out.extend(s for s in self.post_steps if isinstance(s, Linear))
        out.append(self.head)
        return out

    def parameter_count(self, active: bool = False) -> int:
        """Weight-matrix parameters of all GEMMs (embeddings and norms excluded).

        With `active`, routed experts count top_k of num_experts (the per-token active share).
        The LM head counts once, whether tied or not, and so does a block shared by several layers.
        """
        total = 0.0
        for lin in self.linears:
            if lin.tied:
                continue
            copies = lin.tokens_per_token if active else lin.num_experts
            total += lin.in_features * lin.out_features * copies
        return int(total)
