"""What the gate judges: metric families, the headline metric of each, wanted directions, k and thresholds.

The defaults are the reference run's: diversity (distinct-n, up), attractor share (down), memorisation at most
0 % of tuned responses holding a 32-token corpus span, floors at 2 x the run-to-run SD. A spec file
(TOML) overrides any of them:

    floor_k = 2.0
    practical_floor = false  # true: a change must also beat k x the run-to-run SD (see below)
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
    [benchmarks]           # benchmark runs (lm-eval, per-example files)
    gate = true
    hypothesis = "not-worse"   # not-worse | better
    margin = 1.0           # "not worse by more than 1 point" (default 0: only a gain beyond the noise passes)
    floor = 2.0            # a change must also exceed 2 points to count (default: none)
    [benchmarks.task.gsm8k]    # per task or group: any key above but gate, and
    metric = "exact_match"     # the deciding metric and filter (default: the task's first of each)
    filter = "flexible-extract"
    higher_is_better = true    # for metrics lm-eval does not describe (per-example files)

With benchmark runs, diversity is reported as evidence unless the spec's [diversity] sets gate.

Significance is always the estimator's own (the clustered interval of the paired difference of per-document
means, `gate.stats.estimate`); a floor, measured (`practical_floor = true`) or given (`floor`), is a
practical margin a change must beat as well, never the noise a delta is judged against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.gate.inputs import read_toml
from tuneproof.gate.memorise import DEFAULT_K
from tuneproof.gate.metrics import ATTRACTORS, DIVERSITY, MEMORISATION, METRIC_FAMILIES
from tuneproof.gate.stats import DEFAULT_FLOOR_K

SPEC_HINT = "docs/gate.md gives the spec format"


HYPOTHESES = ("not-worse", "better")
_TASK_KEYS = ("hypothesis", "margin", "floor", "metric", "filter", "higher_is_better")


@dataclass(kw_only=True, frozen=True, slots=True)
class TaskSpec:
    """What one benchmark task (or group) must show; None: the [benchmarks] default, or lm-eval's."""

    hypothesis: str | None = None
    margin: float | None = None  # in the unit the table shows (points for fractions)
    floor: float | None = None  # a change must beat this too (a practical floor, same unit)
    metric: str | None = None
    filter: str | None = None
    higher_is_better: bool | None = None


@dataclass(kw_only=True, frozen=True, slots=True)
class BenchSpec:
    gate: bool = True
    hypothesis: str = "not-worse"
    margin: float | None = None
    floor: float | None = None
    tasks: tuple[tuple[str, TaskSpec], ...] = ()

    def task(self, name: str) -> TaskSpec:
        """The task's own settings over the [benchmarks] defaults."""
        own = dict(self.tasks).get(name, TaskSpec())
        return replace(
            own,
            hypothesis=own.hypothesis or self.hypothesis,
            margin=own.margin if own.margin is not None else self.margin,
            floor=own.floor if own.floor is not None else self.floor,
        )


@dataclass(kw_only=True, frozen=True, slots=True)
class FamilySpec:
    gate: bool | None  # None: gated, except with benchmark runs (then evidence)
    metric: str
    wanted: str | None  # None: the metric's own direction (gzip down, the others up; attractors down)


@dataclass(kw_only=True, frozen=True, slots=True)
class GateSpec:
    floor_k: float = DEFAULT_FLOOR_K
    practical_floor: bool = False  # a change must also beat the measured floor (k x the run-to-run SD)
    diversity: FamilySpec = field(
        default_factory=lambda: FamilySpec(gate=None, metric="distinct", wanted=None)
    )
    attractors: FamilySpec = field(default_factory=lambda: FamilySpec(gate=None, metric="share", wanted=None))
    memorisation_gate: bool = True
    threshold: float = 0.0  # memorisation: percent of tuned responses allowed to hold a corpus span
    k: int = DEFAULT_K
    benchmarks: BenchSpec = field(default_factory=BenchSpec)

    def for_benchmarks(self, benchmarks: bool) -> GateSpec:
        """Families whose gate the spec leaves open: gated on response arms, evidence beside benchmarks."""
        return replace(
            self,
            diversity=replace(self.diversity, gate=self.diversity.gate is not False and not benchmarks)
            if self.diversity.gate is None
            else self.diversity,
            attractors=replace(self.attractors, gate=not benchmarks)
            if self.attractors.gate is None
            else self.attractors,
        )

    def __post_init__(self) -> None:
        validate.real("floor_k", self.floor_k, low=0, low_open=True, high=100)
        validate.real("threshold", self.threshold, low=0, high=100)
        validate.integer("k", self.k, low=4, high=4096)
        for name, fam, parts in (
            (DIVERSITY.name, self.diversity, DIVERSITY.parts),
            (ATTRACTORS.name, self.attractors, ATTRACTORS.parts),
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
        _known(
            data,
            "the spec",
            ("floor_k", "practical_floor", *METRIC_FAMILIES, "benchmarks"),
        )
        spec = GateSpec()
        if "floor_k" in data:
            spec = replace(spec, floor_k=data["floor_k"])
        if "practical_floor" in data:
            spec = replace(spec, practical_floor=_bool(data["practical_floor"], "practical_floor"))
        if DIVERSITY.name in data:
            spec = replace(spec, diversity=_family(data[DIVERSITY.name], spec.diversity, DIVERSITY.name))
        if ATTRACTORS.name in data:
            spec = replace(spec, attractors=_family(data[ATTRACTORS.name], spec.attractors, ATTRACTORS.name))
        mem = data.get(MEMORISATION.name, {})
        _known(mem, "[memorisation]", ("gate", "threshold", "k"))
        spec = replace(
            spec,
            memorisation_gate=_bool(mem.get("gate", True), "[memorisation] gate"),
            threshold=mem.get("threshold", spec.threshold),
            k=mem.get("k", spec.k),
        )
        if "benchmarks" in data:
            spec = replace(spec, benchmarks=_benchmarks(data["benchmarks"]))
    except TuneproofError as e:
        raise TuneproofError(f"{p}: {e.message}") from None
    return spec


def _benchmarks(table: Any) -> BenchSpec:
    _known(table, "[benchmarks]", ("gate", "hypothesis", "margin", "floor", "task"))
    default = _task(
        {k: v for k, v in table.items() if k not in ("gate", "task")},
        "[benchmarks]",
        ("hypothesis", "margin", "floor"),
    )
    tasks = table.get("task", {})
    _known(tasks, "[benchmarks.task]", tuple(tasks) if isinstance(tasks, dict) else ())
    return BenchSpec(
        gate=_bool(table.get("gate", True), "[benchmarks] gate"),
        hypothesis=default.hypothesis or "not-worse",
        margin=default.margin,
        floor=default.floor,
        tasks=tuple((str(n), _task(t, f"[benchmarks.task.{n}]", _TASK_KEYS)) for n, t in tasks.items()),
    )


def _task(table: Any, where: str, keys: tuple[str, ...]) -> TaskSpec:
    own = table
    _known(own, where, keys)
    hypothesis = own.get("hypothesis")
    if hypothesis is not None and hypothesis not in HYPOTHESES:
        raise TuneproofError(f"{where} hypothesis = {hypothesis!r}", "use " + " or ".join(HYPOTHESES))
    margin, floor = (_nonnegative(own.get(key), f"{where} {key}") for key in ("margin", "floor"))
    for key in ("metric", "filter"):
        if key in own and (not isinstance(own[key], str) or not own[key].strip()):
            raise TuneproofError(f"{where} {key} must be a non-empty string, got {own[key]!r}", SPEC_HINT)
    higher = own.get("higher_is_better")
    return TaskSpec(
        hypothesis=hypothesis, margin=margin, floor=floor, metric=own.get("metric"), filter=own.get("filter"),
        higher_is_better=None if higher is None else _bool(higher, f"{where} higher_is_better"),
    )  # fmt: skip


def _nonnegative(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise TuneproofError(f"{name} must be a finite number >= 0, got {value!r}", SPEC_HINT)
    return float(value)


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
        gate=_bool(table["gate"], f"[{name}] gate") if "gate" in table else default.gate,
        metric=table.get("metric", default.metric),
        wanted=table.get("wanted", default.wanted),
    )
