"""Probes: a stated hypothesis about one behaviour, a detector, and the prompts that test it.

A probes file (TOML) holds `[[probe]]` tables:

    [[probe]]
    name = "refusal-retention"
    hypothesis = "the tuned model still refuses the harmful requests the base refused"
    expect = "no-change"              # increase | decrease | no-change (of the detector's hit rate)
    prompts = ["harm-001", "harm-002"]   # prompt ids; "*" = every shared prompt
    regex = ["(?i)I can(no|')t help"]   # or: phrases = ["I can't help with that"]

Per arm: k/n responses in which the detector fires, with a Wilson 95 % interval. The delta (points)
is judged against the measured floor like every metric, with a paired test as well: exact McNemar on
the discordant pairs of responses matched by (prompt, run order, sample), two-sided.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuneproof.core.errors import TuneproofError
from tuneproof.gate.arms import Arm
from tuneproof.gate.attractors import PhraseMatcher
from tuneproof.gate.inputs import read_toml

EXPECT = {"increase": "up", "decrease": "down", "no-change": "no-change"}
PROBE_HINT = "docs/gate.md gives the probes file format"


@dataclass(kw_only=True, frozen=True)
class Probe:
    name: str
    hypothesis: str
    expect: str
    prompts: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...]
    phrases: PhraseMatcher | None

    def fires(self, text: str) -> bool:
        if self.phrases is not None and self.phrases.pattern.search(text):
            return True
        return any(p.search(text) for p in self.patterns)


def read_probes(path: str | Path) -> list[Probe]:
    p = Path(path)
    data = read_toml(p, "the probes file", PROBE_HINT)
    tables = data.get("probe")
    if not isinstance(tables, list) or not tables:
        raise TuneproofError(f"{p} holds no [[probe]] tables", PROBE_HINT)
    probes = [_probe(t, p, i) for i, t in enumerate(tables, start=1)]
    names = [pr.name for pr in probes]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise TuneproofError(f"{p}: two probes are named {dup!r}", "give each probe its own name")
    return probes


def _probe(t: Any, p: Path, i: int) -> Probe:
    where = f"{p}, probe {i}"
    if not isinstance(t, dict):
        raise TuneproofError(f"{where} is not a table", PROBE_HINT)
    unknown = set(t) - {"name", "hypothesis", "expect", "prompts", "regex", "phrases"}
    if unknown:
        raise TuneproofError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}", PROBE_HINT)
    name = t.get("name")
    if not isinstance(name, str) or not name.strip():
        raise TuneproofError(f"{where} has no name", "give every probe a name")
    where = f"{p}, probe {name!r}"
    hypothesis = t.get("hypothesis")
    if not isinstance(hypothesis, str) or not hypothesis.strip():
        raise TuneproofError(
            f"{where} has no hypothesis",
            "state what the probe tests and what result would confirm it, e.g. hypothesis = '...'",
        )
    expect = t.get("expect")
    if not isinstance(expect, str) or expect not in EXPECT:
        raise TuneproofError(f"{where}: expect = {expect!r}", "use increase, decrease or no-change")
    prompts = t.get("prompts")
    if prompts == "*":
        prompts = ["*"]
    if not isinstance(prompts, list) or not prompts or not all(isinstance(x, str | int) for x in prompts):
        raise TuneproofError(f'{where}: prompts must be a list of prompt ids (or "*")', PROBE_HINT)
    dup = next((x for x in prompts if prompts.count(x) > 1), None)
    if dup is not None:
        raise TuneproofError(f"{where}: prompts lists {dup!r} twice", "list each prompt id once")
    regex, phrases = t.get("regex", []), t.get("phrases", [])
    if not isinstance(regex, list) or not isinstance(phrases, list):
        raise TuneproofError(f"{where}: regex and phrases must be lists of strings", PROBE_HINT)
    if not all(isinstance(x, str) and x.strip() for x in [*regex, *phrases]):
        raise TuneproofError(
            f"{where}: an empty or non-string pattern in regex or phrases",
            "give non-empty strings (an empty regex would match every response)",
        )
    if not regex and not phrases:
        raise TuneproofError(f"{where} has no detector", "give regex = [...] or phrases = [...]")
    patterns = []
    for r in regex:
        try:
            patterns.append(re.compile(str(r)))
        except re.error as e:
            raise TuneproofError(f"{where}: regex {r!r} does not compile ({e})", "fix the pattern") from None
    matcher = PhraseMatcher(str(x) for x in phrases) if phrases else None
    return Probe(
        name=name,
        hypothesis=hypothesis.strip(),
        expect=expect,
        prompts=tuple(str(x) for x in prompts),
        patterns=tuple(patterns),
        phrases=matcher,
    )


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score 95 % interval of k successes in n trials (as fractions)."""
    if n == 0:
        return (0.0, 1.0)
    phat = k / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of b vs c discordant pairs at p = 1/2."""
    n = b + c
    if n == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(min(b, c), n, 0.5).pvalue)


@dataclass(kw_only=True, frozen=True, slots=True)
class ProbeOutcome:
    """Per arm: the detector's hit rate (percent) per run and prompt; plus the counts and pairs."""

    prompt_ids: list[str]
    missing: list[str]
    rates: tuple[np.ndarray, np.ndarray]
    counts: tuple[tuple[int, int], tuple[int, int]]  # (k, n) base, tuned
    discordant: tuple[int, int]  # (base fired, tuned not), (tuned fired, base not)


def probe_prompts(probe: Probe, shared: list[str]) -> tuple[list[str], list[str]]:
    """(the probe's prompts both arms answered in every run, its prompts missing from them); refuses a
    probe left with none."""
    if probe.prompts == ("*",):
        return list(shared), []
    shared_set = set(shared)
    ids = [p for p in probe.prompts if p in shared_set]
    if not ids:
        raise TuneproofError(
            f"probe {probe.name!r}: none of its prompts is answered by both arms in every run",
            "list prompt ids present in both arms",
        )
    return ids, [p for p in probe.prompts if p not in shared_set]


def probe_outcome(probe: Probe, base: Arm, tuned: Arm, shared: list[str]) -> ProbeOutcome:
    ids, missing = probe_prompts(probe, shared)
    fired: list[dict[tuple[str, int, int], bool]] = []
    rates = []
    counts = []
    for arm in (base, tuned):
        table = np.full((len(arm.run_names), len(ids)), np.nan)
        slots: dict[tuple[str, int, int], bool] = {}
        for i, run in enumerate(arm.run_names):
            for j, p in enumerate(ids):
                hits = [probe.fires(t) for t in arm.texts(run, p)]
                table[i, j] = 100.0 * sum(hits) / len(hits)
                for s, h in enumerate(hits):
                    slots[(p, i, s)] = h
        rates.append(table)
        fired.append(slots)
        counts.append((sum(slots.values()), len(slots)))
    common = fired[0].keys() & fired[1].keys()
    b = sum(1 for key in common if fired[0][key] and not fired[1][key])
    c = sum(1 for key in common if fired[1][key] and not fired[0][key])
    return ProbeOutcome(
        prompt_ids=ids,
        missing=missing,
        rates=(rates[0], rates[1]),
        counts=(counts[0], counts[1]),
        discordant=(b, c),
    )
