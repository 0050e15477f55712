"""The gate's cheap checks, made before any long work: floors given as `METRIC=VALUE`, and arms, spec,
probes and floors that together can be judged (shared prompts, >= 2 runs per arm or a floor for every
judged metric, a floor only for a metric that exists)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tuneproof.core.errors import TuneproofError
from tuneproof.gate.arms import Arm, Pairing, pair
from tuneproof.gate.metrics import ATTRACTORS, DIVERSITY, METRIC_FAMILIES
from tuneproof.gate.probes import Probe, probe_prompts
from tuneproof.gate.spec import GateSpec

if TYPE_CHECKING:
    from tuneproof.gate.bench_lineup import Lineup


def parse_floors(values: Sequence[str]) -> dict[str, float]:
    """`METRIC=VALUE` pairs (the `floors` field); each value a finite number >= 0, each metric once."""
    out: dict[str, float] = {}
    for item in values:
        name, sep, text = item.rpartition("=")  # a probe's name may hold "="; a number never does
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not sep or not name.strip() or not math.isfinite(value) or value < 0:
            raise TuneproofError(
                f"{{floors}} {item!r} is not METRIC=VALUE with a number >= 0",
                "e.g. {floors} diversity=0.008",
                fields=("floors",),
            )
        if name.strip() in out:
            raise TuneproofError(
                f"{{floors}} {name.strip()} is given twice",
                "give each metric's floor once",
                fields=("floors",),
            )
        out[name.strip()] = value
    return out


def floor_names(spec: GateSpec, attractors: bool, probes: Sequence[Probe]) -> list[str]:
    """The metrics that need a floor to be judged: the gated headline of each family, and each probe."""
    names = [DIVERSITY.name] if spec.diversity.gate is not False else []
    if attractors and spec.attractors.gate is not False:
        names.append(ATTRACTORS.name)
    return names + [f"probe:{p.name}" for p in probes]


def check_inputs(
    base: Arm,
    tuned: Arm,
    spec: GateSpec,
    given: Mapping[str, float],
    attractors: bool,
    probes: Sequence[Probe],
    embedder: bool = False,
) -> Pairing:
    """Refuse arms the gate cannot judge: no shared prompts, or one run in an arm with no floor given."""
    if spec.diversity.metric == "embedding" and not embedder:
        raise TuneproofError(
            "the spec's diversity metric is 'embedding' but no {embedder} was given",
            "pass a local embedding model, or pick another diversity metric",
            fields=("embedder",),
        )
    lineup = _benchmarks(base, tuned, spec)
    _known_floors(given, probes, lineup is not None and spec.diversity.gate is None)
    spec = spec.for_benchmarks(lineup is not None)
    if lineup is not None and not (base.runs and tuned.runs):
        if probes:
            raise TuneproofError(
                "probes read response text, and the benchmark runs hold none (loglikelihood tasks)",
                "leave the probes out, or give runs of generation tasks",
            )
        return Pairing([], 0, lineup)
    pairing = replace(pair(base, tuned), lineup=lineup)
    for arm in (base, tuned):
        if lineup is None and all(not r.text.strip() for r in arm.responses()):
            raise TuneproofError(
                f"every response in the {arm.name} arm is empty: there is nothing to judge",
                "check how the arm was generated (a stop token at the first step, a decoding error)",
            )
    runs = {base.name: len(base.run_names), tuned.name: len(tuned.run_names)}
    need = [n for n in floor_names(spec, attractors, probes) if n not in given]
    if min(runs.values()) < 2 and need:
        got = ", ".join(f"{k}: {v}" for k, v in runs.items())
        raise TuneproofError(
            f"need >= 2 runs per arm to measure the instrument's noise; got {got}",
            "generate each arm with 2 or more runs, or give a floor for every judged metric: "
            + " ".join(f"{{floors}} {n}=VALUE" for n in need)
            + " (then the floor is given, not measured)",
            fields=("floors",),
        )
    for probe in probes:
        probe_prompts(probe, pairing.prompt_ids)  # refuses a probe none of whose prompts is shared
    return pairing


def _known_floors(given: Mapping[str, float], probes: Sequence[Probe], no_diversity: bool) -> None:
    """Every given floor names a measured metric (benchmark lines take none: their floor is measured, or
    the paired test stands in)."""
    known = set(floor_names(GateSpec(), True, probes)) | {
        f"{fam}.{part}" for fam, parts in _part_names().items() for part in parts
    }
    for name in given:
        if name not in known:
            raise TuneproofError(
                f"{{floors}} {name}=... names no metric",
                "use diversity, attractors, probe:NAME, or a part such as diversity.gzip (benchmark lines "
                "take no given floor)",
                fields=("floors",),
            )
        if no_diversity and name.split(".")[0] == DIVERSITY.name:
            raise TuneproofError(
                f"{{floors}} {name}=... is for diversity, which is not measured beside benchmark runs",
                "leave it out, or set gate = true under [diversity] in the spec to measure it",
                fields=("floors",),
            )


def _benchmarks(base: Arm, tuned: Arm, spec: GateSpec) -> Lineup | None:
    """Both arms' benchmark runs lined up (`bench_lineup.line_up`); None when neither arm has any."""
    if bool(base.bench) != bool(tuned.bench):
        with_runs, without = (base, tuned) if base.bench else (tuned, base)
        raise TuneproofError(
            f"the {with_runs.name} arm holds benchmark runs and the {without.name} arm response files",
            "give both arms the same kind of input",
        )
    if not base.bench:
        return None
    from tuneproof.gate.bench_lineup import line_up

    return line_up(list(base.bench.values()), list(tuned.bench.values()), spec)


def _part_names() -> dict[str, tuple[str, ...]]:
    return {f.name: f.parts for f in METRIC_FAMILIES.values() if f.parts}
