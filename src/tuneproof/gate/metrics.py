"""The gate's metric families, registered once: each family's name (as the report, the spec's table,
`--floors` and the renderer spell it), the direction a better tuned arm moves, its unit and its parts.
A new family is one record here; every consumer reads it (`judge`, `checks`, `spec`, `render`).
Probes (`probe:NAME`) and benchmark lines are judged per item, not as families."""

from __future__ import annotations

from dataclasses import dataclass

from tuneproof.gate.diversity import PARTS as DIVERSITY_PARTS


@dataclass(kw_only=True, frozen=True, slots=True)
class MetricFamily:
    """One family: `name`; `wanted`, the direction a better tuned arm moves ("up" or "down"; a spec may
    turn diversity's and the attractors' around); `unit`; `parts`, the family's metrics a spec's
    `metric =` or a floor `family.part=` may name (none: one number, judged against a threshold)."""

    name: str
    wanted: str
    unit: str
    parts: tuple[str, ...] = ()


DIVERSITY = MetricFamily(name="diversity", wanted="up", unit="", parts=DIVERSITY_PARTS)
ATTRACTORS = MetricFamily(name="attractors", wanted="down", unit="%", parts=("share", "per_1k_words"))
MEMORISATION = MetricFamily(name="memorisation", wanted="down", unit="%")

# Ordering rule: the order the report lists them in.
METRIC_FAMILIES: dict[str, MetricFamily] = {f.name: f for f in (DIVERSITY, ATTRACTORS, MEMORISATION)}
