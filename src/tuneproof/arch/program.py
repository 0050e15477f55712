"""From a layer's weight GEMMs (`Unit`s, read off the module tree by `tuneproof.arch.construct`) to
the layer program the ledger walks: which node each GEMM reads and writes.

Dataflow rules (what the ledger needs to know which backward GEMMs run): the mixer's projections read
the layer input, a projection whose input width is not the hidden size reads the projection it
follows (DeepSeek's q_a -> q_b, kv_a -> kv_b); the mixer's output projection reads the mixer core;
the feed-forward block reads the residual after the mixer (or the layer input when the two run in
parallel); inside one module, the projection that writes the hidden size reads the others (gate and
up -> down; fc1 -> fc2); routers and gates read the block input and scale its output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from tuneproof.arch.mixers import MixerKind
from tuneproof.arch.shape import AttentionSpec, Join, Linear, Op
from tuneproof.core.errors import TuneproofError


@dataclass(kw_only=True, frozen=True, slots=True)
class Unit:
    """One weight GEMM in a layer: its module path (relative to the layer), widths, and how it is stored."""

    name: str
    in_features: int
    out_features: int
    # "linear" (nn.Linear / Conv1D: PEFT can wrap it), "experts" (a 3-D parameter), "router", "block"
    # (a 3-D parameter of per-head weights every token runs through: a block-diagonal GEMM)
    kind: str
    num_experts: int = 1
    dense: bool = False
    no_grad: bool = False  # inside a module whose forward runs under torch.no_grad (a DSA indexer)
    wrap_fails: bool = False  # an nn.Linear subclass PEFT wraps but whose wrapped forward fails

    @property
    def parent(self) -> str:
        return self.name.rpartition(".")[0]

    @property
    def leaf(self) -> str:
        return self.name.rpartition(".")[2]


def _roles(leaf: str) -> frozenset[str]:
    """Which of q, k, v a mixer projection feeds, from its name (unknown: all three)."""
    s = leaf.lower().removeprefix("project_")  # CPM-Ant's project_q, project_k, project_v
    if any(t in s for t in ("qkv", "query_key_value", "c_attn", "wqkv", "in_proj")):
        return frozenset("qkv")
    if s.startswith("kv") or "_kv" in s:
        return frozenset("kv")
    if s.startswith(("q", "query")):
        return frozenset("q")
    if s.startswith(("k", "key")):
        return frozenset("k")
    if s.startswith(("v", "value")):
        return frozenset("v")
    return frozenset("qkv")


def _stem(leaf: str) -> str:
    return re.sub(r"(_[ab])?_proj.*$", "", leaf)


def mixer_steps(units: list[Unit], hidden: int, spec: AttentionSpec, mixer: MixerKind) -> list[Op]:
    """Projections in, the mixer core, the output projection; "mid" is the residual after it."""
    if mixer.side is not None:
        return parallel_mixer_steps(units, hidden, spec, mixer)
    if mixer.program is not None and mixer.delta is not None:  # a mixer with its own dataflow
        return mixer.program(units, hidden, mixer.delta)
    outs = [i for i, u in enumerate(units) if u.out_features == hidden and not u.no_grad]
    out_idx = max([i for i in outs if units[i].leaf in _OUT_NAMES] or outs, default=None)
    if out_idx is None:
        raise TuneproofError(
            f"the mixer's projections {[u.name for u in units]} have no output projection to the hidden size",
            "this mixer is not one tuneproof can read",
        )
    steps: list[Op] = []
    written: dict[str, str] = {}  # unit name -> node
    feeds: dict[str, list[str]] = {"q": [], "k": [], "v": []}
    for i, u in enumerate(units):
        if i == out_idx:
            continue
        node = f"mix.{i}"
        src = "in"
        if u.in_features != hidden:
            before = [w for w in units[:i] if w.name in written]
            same = [w for w in before if _stem(w.leaf) == _stem(u.leaf)]
            wide = [w for w in before if w.out_features >= u.in_features]
            candidates = same or wide or before
            if candidates:
                src = written[candidates[-1].name]
        adaptable = u.leaf not in mixer.weight_only  # read as `.weight @ x`: LoRA on it never runs
        steps.append(
            Linear(
                name=u.name,
                in_features=u.in_features,
                out_features=u.out_features,
                src=src,
                dst=node,
                component=_component(u.leaf),
                adaptable=adaptable,
            )
        )
        if u.no_grad:  # the indexer's projections: forward only, feeding no q, k or v
            lin = steps.pop()
            assert isinstance(lin, Linear)
            steps.append(replace(lin, no_grad=True, component="attention.indexer_proj"))
            continue
        written[u.name] = node
        for role in _roles(u.leaf):
            feeds[role].append(node)
    for role, nodes in feeds.items():
        steps.append(Join(f"mix.{role}", tuple(nodes) or ("in",)))
    steps.extend(mixer.core_steps("mix.q", "mix.k", "mix.v", "attn"))
    o = units[out_idx]
    steps.append(
        Linear(
            name=o.name,
            in_features=o.in_features,
            out_features=o.out_features,
            src="attn",
            dst="o",
            component="o_proj",
        )
    )
    steps.append(Join("mid", ("in", "o")))
    return steps


def parallel_mixer_steps(units: list[Unit], hidden: int, spec: AttentionSpec, mixer: MixerKind) -> list[Op]:
    """Two mixers side by side on the layer input (`mixers.PARALLEL_MIXERS`, Falcon-H1): each child's
    projections, core and output projection as `mixer_steps` builds them, its nodes prefixed with the
    child's name; "mid" is the residual plus both outputs."""
    assert mixer.side is not None
    side_child, core = mixer.side
    side = [u for u in units if u.name.split(".")[0] == side_child]
    main = [u for u in units if u not in side]
    steps: list[Op] = []
    groups = (("main", main, replace(mixer, side=None)), (side_child, side, MixerKind(spec=spec, delta=core)))
    for prefix, group, kind in groups:
        for s in mixer_steps(group, hidden, spec, kind)[:-1]:  # its own "mid" join left out
            steps.append(_prefixed(s, prefix))
    steps.append(Join("mid", ("in", "main.o", f"{side_child}.o")))
    return steps


def _prefixed(step: Op, prefix: str) -> Op:
    """`step` with every node but the layer input renamed into `prefix`'s namespace."""

    def n(node: str) -> str:
        return node if node == "in" else f"{prefix}.{node}"

    if isinstance(step, Join):
        return replace(step, dst=n(step.dst), srcs=tuple(n(x) for x in step.srcs))
    nodes = [f for f in ("src", "q", "k", "v", "dst") if hasattr(step, f)]  # Linear, cores, scores
    return replace(step, **{f: n(getattr(step, f)) for f in nodes})  # type: ignore[arg-type]


# output projections by name, preferred over a later GEMM that also writes the hidden size (HY-V4's
# attention output gate_proj)
_OUT_NAMES = frozenset({"o_proj", "out_proj"})
_COMPONENTS = {"q_proj", "k_proj", "v_proj", "o_proj"}


def _component(leaf: str) -> str:
    return leaf if leaf in _COMPONENTS else "attention.proj"


def norm_gate_steps(units: list[Unit], node: str) -> list[Op]:
    """The GEMMs inside a norm module (A.X-K2's gated RMSNorm, transformers models/axk2/modeling_axk2.py
    AXK2GatedRMSNorm: y = norm(x), y * sigmoid(fc2(silu(fc1(y))))): a chain on the normed `node`, whose
    output then stands for `node` (the block after the norm reads the gated value)."""
    steps: list[Op] = []
    src = node
    for u in units:
        dst = f"norm.{u.name}"
        component = "hyper_connection" if u.kind == "router" else "norm_gate"
        adaptable = u.kind == "linear"  # a hyper-connection's raw weight: no adapter wraps it
        steps.append(
            Linear(
                name=u.name,
                in_features=u.in_features,
                out_features=u.out_features,
                src=src,
                dst=dst,
                component=component,
                adaptable=adaptable,
            )
        )
        src = dst
    return [*steps, Join(node, (node, src))] if steps else []


def ffn_steps(units: list[Unit], hidden: int, top_k: int | None, src: str) -> list[Op]:
    """The feed-forward block: per parent module, the projection writing the hidden size reads the
    others; experts run on top_k rows per token; routers and gates read the block input."""
    steps: list[Op] = []
    outputs: list[str] = []
    for idxs in _blocks(units, hidden):
        members = [units[i] for i in idxs]
        last = max((j for j, u in enumerate(members) if u.out_features == hidden), default=None)
        reads: list[str] = []
        for j, u in enumerate(members):
            node = f"ffn.{idxs[j]}"
            expert = u.kind == "experts"
            if expert and top_k is None:
                raise TuneproofError(
                    "the model has routed experts but the config names no top-k",
                    "set num_experts_per_tok (or the family's top-k field) in the config",
                )
            kw: dict[str, Any] = (
                dict(
                    tokens_per_token=float(top_k or 1),
                    adaptable=False,
                    num_experts=u.num_experts,
                    dense=u.dense,
                )
                if expert
                else {"adaptable": u.kind == "linear", "wrap_fails": u.wrap_fails}
            )
            component = _ffn_component(u)
            if j == last and reads:
                steps.append(Join(f"{node}.in", tuple(reads)))
                steps.append(
                    Linear(
                        name=u.name,
                        in_features=u.in_features,
                        out_features=u.out_features,
                        src=f"{node}.in",
                        dst=node,
                        component=component,
                        **kw,
                    )
                )
                outputs.append(node)
            else:
                steps.append(
                    Linear(
                        name=u.name,
                        in_features=u.in_features,
                        out_features=u.out_features,
                        src=src,
                        dst=node,
                        component=component,
                        **kw,
                    )
                )
                (reads if j != last else outputs).append(node)
                if u.kind == "router" or (u.out_features < hidden and j != last and len(members) == 1):
                    outputs.append(node)
        if last is None:  # a gate only (shared_expert_gate, router): it scales the block's output
            outputs.extend(f"ffn.{i}" for i in idxs)
    steps.append(Join("ffn", tuple(dict.fromkeys(outputs)) or (src,)))
    return steps


def _blocks(units: list[Unit], hidden: int) -> list[list[int]]:
    """The feed-forward block's units per module (routers each alone). A module of projections none of
    which writes the hidden size, nested in a module whose projection does, joins that module ahead of
    its own units: the writer reads them (CPM-Ant's ffn.w_in.w_0 and w_1, read by ffn.w_out)."""
    by_parent: dict[str, list[int]] = {}
    for i, u in enumerate(units):
        by_parent.setdefault(u.parent if u.kind != "router" else f"router:{u.name}", []).append(i)
    writes = {p for p, idxs in by_parent.items() if any(units[i].out_features == hidden for i in idxs)}
    inner: dict[str, list[int]] = {}
    for p, idxs in list(by_parent.items()):
        outer = [q for q in writes if p.startswith(q + ".")] if p not in writes else []
        if outer and all(units[i].kind == "linear" for i in idxs):
            inner.setdefault(max(outer, key=len), []).extend(by_parent.pop(p))
    return [inner.get(p, []) + idxs for p, idxs in by_parent.items()]


def _ffn_component(u: Unit) -> str:
    if u.kind == "experts":
        return "experts"
    if u.kind == "router" or (u.leaf in ("gate", "router") and u.out_features != 1):
        return "router"
    if "shared" in u.name:
        return "shared_expert"
    return "mlp"
