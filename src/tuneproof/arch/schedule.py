"""The order a decoder runs its layers in, when it is not each layer once from first to last.

Looped (recurrent-depth) decoders run a middle section of their layer stack several times with the
same weights: every run is a full forward (and backward) of those layers, so the FLOP ledger walks
the schedule, not the module list. Parameters are counted once per module (`ModelShape.layers`).

Hierarchical decoders (HRM) hold two stacks of layers and run them in cycles, each run reading the
sum of both stacks' latest states, some runs under torch.no_grad: their schedule says, per run, what
its input sums (`Schedule.reads`) and which runs are forward only (`Schedule.no_grad`).

Families are read from their config fields, one record per family (`LOOPED`, `HIERARCHICAL`), each
with its source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(kw_only=True, frozen=True, slots=True)
class Looped:
    """Config fields of a decoder whose layers run as input section, a looped middle section, then
    an output section: `inputs` layers once, the next `looped` layers `loops` times in a row, the last
    `outputs` layers once."""

    inputs: str
    looped: str
    outputs: str
    loops: str


# Source: transformers models/dory/modeling_dory.py DoryModel.forward (layers[:n_input_layers] once;
# n_recurrent_loops times layers[n_input_layers : n_input_layers + n_recurrent_layers], each loop
# starting from norm(hidden) + norm(input section output), no matmul; then the last n_output_layers
# once). Each loop's attention reads its own keys only (its own cache copy in "per_loop" mode, none
# in training), so every run costs what a plain layer costs.
LOOPED: dict[str, Looped] = {
    "dory": Looped(
        inputs="n_input_layers",
        looped="n_recurrent_layers",
        outputs="n_output_layers",
        loops="n_recurrent_loops",
    ),
}


@dataclass(kw_only=True, frozen=True, slots=True)
class Hierarchical:
    """A decoder of two stacks, low (L) and high (H), of `per_stack` layers each, run in `high`
    cycles: `low` runs of the L stack, each on z_L + z_H (z_L starts as a constant, z_H as the
    embeddings), then one run of the H stack on z_H + z_L. Of each cycle's L runs only the last
    `grad_cycles[h]` keep gradients (the list left-padded with 1 to `high` entries), the earlier ones
    run under torch.no_grad. `stacks` are the two stacks' module names (low, high)."""

    stacks: tuple[str, str]
    per_stack: str
    high: str
    low: str
    grad_cycles: str


# Source: transformers models/hrm_text/modeling_hrm_text.py HrmTextModel.__init__ (L_module and H_module,
# each an HrmTextStack of num_layers_per_stack layers; L_bp_cycles_padded) and HrmTextModel.forward (the
# H_cycles x (L_cycles + 1) loop; `torch.no_grad()` for low_cycle_idx < L_cycles - L_bp_cycles_padded[h];
# z_L_init is a frozen zero vector; HrmTextStack.forward ends in a norm, no matmul). The config's
# num_hidden_layers counts every run (one cache slot each), not the layers.
HIERARCHICAL: dict[str, Hierarchical] = {
    "hrm_text": Hierarchical(
        stacks=("L_module", "H_module"),
        per_stack="num_layers_per_stack",
        high="H_cycles",
        low="L_cycles",
        grad_cycles="L_bp_cycles",
    ),
}


@dataclass(frozen=True, slots=True)
class Passes:
    """Config fields of a decoder whose layers `start` to `end` - 1 run `passes` times in a row: the
    first pass runs their first-pass programs (`ModelShape.variants`, positions num_layers + k), each
    later pass their own programs, restarting from the output of the layer before the section."""

    start: str
    end: str
    passes: str


# Source: transformers models/inkling2_loop/modeling_inkling2_loop.py Inkling2LoopTextModel.forward (the
# pre-loop layers; the first pass over layers[loop_layer_index_start:loop_layer_index_end] without
# messages; loop_num_passes - 1 more passes from the pre-loop hidden and block states, each layer
# reading messages from the previous pass; the post-loop layers).
PASSES: dict[str, Passes] = {
    "inkling2_loop_text": Passes("loop_layer_index_start", "loop_layer_index_end", "loop_num_passes"),
}


@dataclass(frozen=True, slots=True)
class Schedule:
    """Layer positions in run order (`runs`; () when each layer runs once in order), per run the nodes
    its input sums when that is not the previous run's output (`reads`; () for all: each run reads the
    one before) and the runs made under torch.no_grad (`no_grad`, positions in `runs`)."""

    runs: tuple[int, ...] = ()
    reads: tuple[tuple[str, ...], ...] = ()
    no_grad: frozenset[int] = field(default_factory=frozenset)


def layer_schedule(cfg: Any, num_layers: int) -> Schedule:
    """The order `cfg`'s model runs its `num_layers` layers in (`Schedule`)."""
    model_type = getattr(cfg, "model_type", "")
    if (stacked := HIERARCHICAL.get(model_type)) is not None:
        return _hierarchical(cfg, stacked)
    if (passes := PASSES.get(model_type)) is not None:
        return _passes(cfg, passes, num_layers)
    rule = LOOPED.get(model_type)
    if rule is None:
        return Schedule()
    first = int(getattr(cfg, rule.inputs))
    looped = list(range(first, first + int(getattr(cfg, rule.looped))))
    last = num_layers - int(getattr(cfg, rule.outputs))
    return Schedule((*range(first), *looped * int(getattr(cfg, rule.loops)), *range(last, num_layers)))


def _hierarchical(cfg: Any, rule: Hierarchical) -> Schedule:
    """HRM's runs (`Hierarchical`): the L stack's layers are positions 0..n-1, the H stack's n..2n-1;
    a stack's first layer reads the sum of both states, the others the layer before."""
    n, high, low = (int(getattr(cfg, f)) for f in (rule.per_stack, rule.high, rule.low))
    raw = [int(c) for c in getattr(cfg, rule.grad_cycles)]
    grad = [1] * max(0, high - len(raw)) + raw
    runs: list[int] = []
    reads: list[tuple[str, ...]] = []
    no_grad: set[int] = set()
    z_low: tuple[str, ...] = ()  # z_L_init: a frozen constant, no gradient
    z_high: tuple[str, ...] = ("model:embed",)

    def stack(first: int, state: tuple[str, ...], frozen: bool) -> None:
        for j in range(first, first + n):
            if frozen:
                no_grad.add(len(runs))
            runs.append(j)
            reads.append(state if j == first else (f"L{j - 1}:out",))

    for h in range(high):
        threshold = low - (grad[h] if h < len(grad) else 1)
        for cycle in range(low):
            stack(0, z_low + z_high, frozen=cycle < threshold)
            z_low = (f"L{n - 1}:out",)
        stack(n, z_high + z_low, frozen=False)
        z_high = (f"L{2 * n - 1}:out",)
    return Schedule(tuple(runs), tuple(reads), frozenset(no_grad))


def _passes(cfg: Any, rule: Passes, num_layers: int) -> Schedule:
    """`Passes`' runs: each reads the run before it, but a later pass's first layer reads the output
    of the layer before the section."""
    start, end, passes = (int(getattr(cfg, f)) for f in (rule.start, rule.end, rule.passes))
    section = list(range(start, end))
    runs = [*range(start), *(num_layers + k for k in range(len(section)))]
    for _ in range(passes - 1):
        runs += section
    runs += range(end, num_layers)

    def layer(position: int) -> int:  # the layer index a schedule position runs (a variant: its module's)
        return position - num_layers + start if position >= num_layers else position

    reads: list[tuple[str, ...]] = [("model:embed",)]
    for pos in range(1, len(runs)):
        restart = runs[pos] == start  # a later pass: from the pre-loop output, not the last pass's
        reads.append((f"L{start - 1 if restart else layer(runs[pos - 1])}:out",))
    return Schedule(tuple(runs), tuple(reads))


def stack_names(cfg: Any) -> tuple[str, ...] | None:
    """The module names of a hierarchical decoder's stacks, in layer order; None for one stack."""
    rule = HIERARCHICAL.get(getattr(cfg, "model_type", ""))
    return None if rule is None else rule.stacks


def stack_size(cfg: Any) -> int | None:
    """Layers per stack of a hierarchical decoder; None for one stack."""
    rule = HIERARCHICAL.get(getattr(cfg, "model_type", ""))
    return None if rule is None else int(getattr(cfg, rule.per_stack))
