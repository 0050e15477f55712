"""The order a decoder runs its layers in, when it is not each layer once from first to last.

Looped (recurrent-depth) decoders run a middle section of their layer stack several times with the
same weights: every run is a full forward (and backward) of those layers, so the FLOP ledger walks
the schedule, not the module list. Parameters are counted once per module (`ModelShape.layers`).

Families are read from their config fields, one record per family (`LOOPED`), each with its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
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
    "dory": Looped("n_input_layers", "n_recurrent_layers", "n_output_layers", "n_recurrent_loops"),
}


def layer_schedule(cfg: Any, num_layers: int) -> tuple[int, ...]:
    """Layer positions in the order the model runs them; () when it runs each layer once in order."""
    rule = LOOPED.get(getattr(cfg, "model_type", ""))
    if rule is None:
        return ()
    first = int(getattr(cfg, rule.inputs))
    looped = list(range(first, first + int(getattr(cfg, rule.looped))))
    last = num_layers - int(getattr(cfg, rule.outputs))
    return (*range(first), *looped * int(getattr(cfg, rule.loops)), *range(last, num_layers))
