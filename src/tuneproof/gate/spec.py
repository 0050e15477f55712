"""What the gate judges: metric families, the headline metric of each, wanted directions, k and thresholds.

The defaults are the reference run's: diversity (distinct-n, up), attractor share (down), memorisation at most
0 % of tuned responses holding a 32-token corpus span, floors at 2 x the run-to-run SD. A spec file
(TOML) overrides any of them:

    floor_k = 2.0
    [diversity]
    gate = true            # false: reported, never judged
    metric = "distinct"    # distinct | distinct-1..4 | gzip | embedding
    wanted = "up"          # default: the metric's own direction (gzip: down)
    [attractors]
    metric = "share"       # share | per_1k_words
    wanted = "down"
    [memorisation]
    threshold = 0.0        # percent of tuned responses allowed to hold a corpus k-gram
    k = 32
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tuneproof import validate
from tuneproof.errors import TuneproofError
from tuneproof.gate.diversity import PARTS as DIVERSITY_PARTS
from tuneproof.gate.inputs import read_toml
from tuneproof.gate.memorise import DEFAULT_K
from tuneproof.gate.stats import DEFAULT_FLOOR_K

ATTRACTOR_PARTS = ("share", "per_1k_words")
SPEC_HINT = "docs/gate.md gives the spec format"


@dataclass(frozen=True, slots=True)
class FamilySpec:
    gate: bool
    metric: str
    wanted: str | None  # None: the metric's own direction (gzip down, the others up; attractors down)


@dataclass(frozen=True, slots=True)
class GateSpec:
    floor_k: float = DEFAULT_FLOOR_K
    diversity: FamilySpec = field(default_factory=lambda: FamilySpec(True, "distinct", None))
    attractors: FamilySpec = field(default_factory=lambda: FamilySpec(True, "share", None))
    memorisation_gate: bool = True
    threshold: float = 0.0  # memorisation: percent of tuned responses allowed to hold a corpus span
    k: int = DEFAULT_K

    def __post_init__(self) -> None:
        validate.real("floor_k", self.floor_k, low=0, low_open=True, high=100)
        validate.real("threshold", self.threshold, low=0, high=100)
        validate.integer("k", self.k, low=4, high=4096)
        for name, fam, parts in (
            ("diversity", self.diversity, DIVERSITY_PARTS),
            ("attractors", self.attractors, ATTRACTOR_PARTS),
        ):
            if fam.metric not in parts:
                raise TuneproofError(
                    f"[{name}] metric = {fam.metric!r} is not known", "use " + ", ".join(parts)
                )
            if fam.wanted not in (None, "up", "down"):
                raise TuneproofError(f"[{name}] wanted = {fam.wanted!r}", "use up or down")


def read_spec(path: str | Path) -> GateSpec:
    p = Path(path)
    data = read_toml(p, "the spec", SPEC_HINT)
    try:
        _known(data, "the spec", ("floor_k", "diversity", "attractors", "memorisation"))
        spec = GateSpec()
        if "floor_k" in data:
            spec = replace(spec, floor_k=data["floor_k"])
        if "diversity" in data:
            spec = replace(spec, diversity=_family(data["diversity"], spec.diversity, "diversity"))
        if "attractors" in data:
            spec = replace(spec, attractors=_family(data["attractors"], spec.attractors, "attractors"))
        mem = data.get("memorisation", {})
        _known(mem, "[memorisation]", ("gate", "threshold", "k"))
        spec = replace(
            spec,
            memorisation_gate=_bool(mem.get("gate", True), "[memorisation] gate"),
            threshold=mem.get("threshold", spec.threshold),
            k=mem.get("k", spec.k),
        )
    except TuneproofError as e:
        raise TuneproofError(f"{p}: {e.message}") from None
    return spec


def _known(table: Any, where: str, keys: tuple[str, ...]) -> None:
    if not isinstance(table, dict):
        raise TuneproofError(f"{where} must be a table", SPEC_HINT)
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise TuneproofError(
            f"{where} has unknown key(s) {', '.join(unknown)}", "it takes " + ", ".join(keys)
        )


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TuneproofError(f"{name} must be true or false, got {value!r}", SPEC_HINT)
    return value


def _family(table: Any, default: FamilySpec, name: str) -> FamilySpec:
    _known(table, f"[{name}]", ("gate", "metric", "wanted"))
    return FamilySpec(
        _bool(table.get("gate", default.gate), f"[{name}] gate"),
        table.get("metric", default.metric),
        table.get("wanted", default.wanted),
    )
