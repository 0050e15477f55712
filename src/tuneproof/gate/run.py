"""The gate: tuned vs base on every metric family, each judged against the instrument's measured noise.

`check_inputs` refuses what cannot be judged before any work starts; `run_gate` computes the families
and probes; the overall verdict is FAIL when any judged metric fails, INCONCLUSIVE when none fails but
one is inconclusive or could not be judged, PASS when every judged metric passes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tuneproof.errors import TuneproofError
from tuneproof.gate import stats
from tuneproof.gate.arms import Arm, Pairing, pair
from tuneproof.gate.attractors import PhraseMatcher, attractor_scores
from tuneproof.gate.diversity import WANTED as DIVERSITY_WANTED
from tuneproof.gate.diversity import Embedder, diversity_scores
from tuneproof.gate.memorise import KGramIndex, build_index, query, span_text
from tuneproof.gate.probes import EXPECT, Probe, mcnemar_exact, probe_outcome, probe_prompts, wilson
from tuneproof.gate.spec import GateSpec
from tuneproof.gate.stats import FAIL, INCONCLUSIVE, PASS, Floor, MetricResult
from tuneproof.gate.tokens import Tokens

EXIT = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
SPAN_TEXTS = 20  # tuned responses whose corpus span is quoted (all are listed)


@dataclass
class ProbeResult:
    probe: Probe
    result: MetricResult
    counts: tuple[tuple[int, int], tuple[int, int]]
    mcnemar_p: float
    missing: list[str]

    @property
    def held(self) -> str:
        return {PASS: "held", FAIL: "did not hold", INCONCLUSIVE: "undecided"}.get(
            self.result.verdict or "", "not judged"
        )

    def to_dict(self) -> dict[str, Any]:
        out = self.result.to_dict()
        (kb, nb), (kt, nt) = self.counts
        out.update(
            hypothesis=self.probe.hypothesis,
            expect=self.probe.expect,
            hypothesis_held=self.held,
            base_count={"k": kb, "n": nb, "wilson95": [100 * x for x in wilson(kb, nb)]},
            tuned_count={"k": kt, "n": nt, "wilson95": [100 * x for x in wilson(kt, nt)]},
            mcnemar_p=self.mcnemar_p,
            missing_prompts=self.missing,
        )
        return out


@dataclass
class GateReport:
    metrics: dict[str, MetricResult]
    probes: list[ProbeResult]
    verdict: str
    inputs: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        return {
            "metrics": {k: v.to_dict() for k, v in self.metrics.items()},
            "probes": [p.to_dict() for p in self.probes],
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "inputs": self.inputs,
            "notes": self.notes,
        }


def floor_names(spec: GateSpec, attractors: bool, probes: Sequence[Probe]) -> list[str]:
    """The metrics that need a floor to be judged: the gated headline of each family, and each probe."""
    names = ["diversity"] if spec.diversity.gate else []
    if attractors and spec.attractors.gate:
        names.append("attractors")
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
    pairing = pair(base, tuned)
    for arm in (base, tuned):
        if all(not r.text.strip() for r in arm.responses()):
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
    known = set(floor_names(GateSpec(), True, probes)) | {
        f"{fam}.{part}" for fam, parts in _part_names().items() for part in parts
    }
    for name in given:
        if name not in known:
            raise TuneproofError(
                f"{{floors}} {name}=... names no metric",
                "use diversity, attractors, probe:NAME, or a part such as diversity.gzip",
                fields=("floors",),
            )
    return pairing


def _part_names() -> dict[str, tuple[str, ...]]:
    from tuneproof.gate.diversity import PARTS
    from tuneproof.gate.spec import ATTRACTOR_PARTS

    return {"diversity": PARTS, "attractors": ATTRACTOR_PARTS}


def _floor(name: str, b: np.ndarray, t: np.ndarray, k: float, given: Mapping[str, float], unit: str) -> Floor:
    if name in given:
        return Floor.given(given[name])
    return stats.measured_floor(b, t, k, " pts" if unit == "%" else unit)


def _family(
    name: str,
    parts: Mapping[str, tuple[np.ndarray, np.ndarray]],
    headline: str,
    wanted: Mapping[str, str],
    k: float,
    given: Mapping[str, float],
    units: Mapping[str, str],
    gate: bool,
) -> MetricResult:
    """One family: every part judged against its own floor; the headline part decides (when gated)."""
    results = {}
    for part, (b, t) in parts.items():
        key = name if part == headline else f"{name}.{part}"
        unit = units.get(part, "")
        results[part] = stats.judge(part, wanted[part], b, t, _floor(key, b, t, k, given, unit), unit=unit)
    head = results[headline]
    family = MetricResult(**{**{f: getattr(head, f) for f in head.__dataclass_fields__}, "name": name})
    family.extra = {"metric": headline, "gated": gate}
    family.parts = [r for p, r in results.items() if p != headline]
    if not gate:
        family.reason = "reported, not gated (spec): " + family.reason
    return family


def _skipped(name: str, wanted: str, reason: str) -> MetricResult:
    return MetricResult(
        name, wanted, "", None, None, None, None, "none", reason, None, None, None, 0, None, reason,
        extra={"skipped": True},
    )  # fmt: skip


def run_gate(
    base: Arm,
    tuned: Arm,
    spec: GateSpec | None = None,
    *,
    attractors: tuple[PhraseMatcher, str] | None = None,
    corpus: Sequence[str | Path] = (),
    tokens: Tokens | None = None,
    probes: Sequence[Probe] = (),
    embed: Embedder | None = None,
    given_floors: Mapping[str, float] | None = None,
    progress: Callable[[str], None] | None = None,
) -> GateReport:
    spec = spec or GateSpec()
    given = dict(given_floors or {})
    say = progress or (lambda _m: None)
    pairing = check_inputs(base, tuned, spec, given, attractors is not None, probes, embed is not None)
    ids = pairing.prompt_ids
    notes = [n for n in [pairing.note()] if n]
    k = spec.floor_k

    say("diversity")
    metrics = {"diversity": _diversity(base, tuned, ids, spec, embed, given, notes)}
    if attractors is None:
        metrics["attractors"] = _skipped(
            "attractors",
            spec.attractors.wanted or "down",
            "skipped: no attractor list given (tuneproof attractors mine makes one)",
        )
    else:
        say("attractors")
        metrics["attractors"] = _attractors(base, tuned, ids, spec, attractors, given)

    if not corpus:
        metrics["memorisation"] = _skipped("memorisation", "down", "skipped: no training corpus given")
    else:
        index = build_index(corpus, spec.k, tokens, progress=say)
        say("memorisation: querying")
        metrics["memorisation"] = memorisation(base, tuned, ids, index, tokens or Tokens(), spec)

    for arm in (base, tuned):
        empty = sum(1 for r in arm.responses() if not r.text.strip())
        if empty:
            notes.append(f"{empty} of {arm.num_responses} {arm.name} responses are empty")
    results = []
    for probe in probes:
        say(f"probe {probe.name}")
        results.append(judge_probe(probe, base, tuned, ids, k, given))
        if results[-1].missing:
            notes.append(
                f"probe {probe.name}: {len(results[-1].missing)} of its prompts are not in both arms "
                "(judged on the rest)"
            )
    return GateReport(metrics, results, overall(metrics, results), _inputs(base, tuned, pairing, spec), notes)


def _diversity(
    base: Arm,
    tuned: Arm,
    ids: list[str],
    spec: GateSpec,
    embed: Embedder | None,
    given: Mapping[str, float],
    notes: list[str],
) -> MetricResult:
    div = diversity_scores(base, tuned, ids, embed)
    wanted = {p: DIVERSITY_WANTED.get(p, "up") for p in div.scores}
    if spec.diversity.wanted:
        wanted[spec.diversity.metric] = spec.diversity.wanted
    family = _family(
        "diversity", div.scores, spec.diversity.metric, wanted, spec.floor_k, given, {}, spec.diversity.gate
    )
    family.extra.update(
        matched_tokens_median=float(np.median(div.matched_lengths)) if div.matched_lengths.size else None,
        prompts_too_short=div.num_short,
        samples_per_prompt=div.samples_per_prompt,
    )
    if div.num_short:
        notes.append(
            f"diversity: {div.num_short} prompts left out (a response under 4 tokens cannot be matched)"
        )
    if div.num_uneven:
        notes.append(
            f"diversity: {div.num_uneven} prompts have more samples in some arm or run than in another; "
            "each is compared on the fewest"
        )
    if div.samples_per_prompt < 2:
        notes.append(
            "diversity: 1 sample per prompt, so diversity is within one response, not across samples"
        )
    return family


def _attractors(
    base: Arm,
    tuned: Arm,
    ids: list[str],
    spec: GateSpec,
    attractors: tuple[PhraseMatcher, str],
    given: Mapping[str, float],
) -> MetricResult:
    matcher, sha = attractors
    scores = attractor_scores(base, tuned, ids, matcher)
    direction = spec.attractors.wanted or "down"
    family = _family(
        "attractors",
        {"share": scores.share, "per_1k_words": scores.per_1k_words},
        spec.attractors.metric,
        {"share": direction, "per_1k_words": direction},
        spec.floor_k,
        given,
        {"share": "%", "per_1k_words": "/1k words"},
        spec.attractors.gate,
    )
    family.extra.update(
        list_sha256=sha,
        num_phrases=len(matcher.phrases),
        top_phrases=[{"phrase": p, "base": b, "tuned": t} for p, b, t in scores.top],
    )
    return family


def judge_probe(
    probe: Probe, base: Arm, tuned: Arm, ids: list[str], k: float, given: Mapping[str, float]
) -> ProbeResult:
    out = probe_outcome(probe, base, tuned, ids)
    b, t = out.rates
    p_value = mcnemar_exact(*out.discordant)
    floor = _floor(f"probe:{probe.name}", b, t, k, given, "%")
    result = stats.judge(probe.name, EXPECT[probe.expect], b, t, floor, unit="%", test=("McNemar", p_value))
    (kb, nb), (kt, nt) = out.counts
    for k_, n_, what in ((0, 0, "no"), (nb, nt, "every")):
        if kb == k_ and kt == n_:
            result.verdict = INCONCLUSIVE
            result.reason = (
                f"the detector fires on {what} response in both arms, so it cannot tell them apart "
                "(check its regex or phrases against a few responses)"
            )
    return ProbeResult(probe, result, out.counts, p_value, out.missing)


def memorisation(
    base: Arm, tuned: Arm, ids: list[str], index: KGramIndex, tokens: Tokens, spec: GateSpec
) -> MetricResult:
    """Share of responses (percent) holding a corpus k-gram, per arm; FAIL when tuned's is above the
    threshold."""
    shares: list[float] = []
    spans: list[dict[str, Any]] = []
    counts = []
    for arm in (base, tuned):
        keys = [(run, p, s) for run in arm.run_names for p in ids for s in range(len(arm.texts(run, p)))]
        texts = [arm.texts(run, p)[s] for run, p, s in keys]
        hit, longest = query(index, texts, tokens)
        shares.append(100.0 * float(hit.mean()) if hit.size else 0.0)
        counts.append((int(hit.sum()), int(hit.size)))
        if arm is tuned:
            # every tuned response with a corpus span, longest first; the text of the first few
            order = sorted(np.flatnonzero(hit), key=lambda i: (-int(longest[i]), int(i)))
            for rank, i in enumerate(order):
                run, p, s = keys[i]
                text = span_text(index, texts[i], tokens) if rank < SPAN_TEXTS else None
                spans.append(
                    {"tokens": int(longest[i]), "prompt_id": p, "run": run, "sample": s, "text": text}
                )
    best = spans[0] if spans else None
    threshold = spec.threshold
    kt, nt = counts[1]
    verdict: str | None = PASS if shares[1] <= threshold else FAIL
    if verdict == PASS:
        reason = (
            f"{kt} of {nt} tuned responses hold a {index.k}-token corpus span (threshold {threshold:g} %)"
        )
    else:
        assert best is not None
        reason = (
            f"{kt} of {nt} tuned responses hold a {index.k}-token corpus span (threshold {threshold:g} %); "
            f"longest: {best['tokens']} tokens in prompt {best['prompt_id']!r}"
        )
    if not spec.memorisation_gate:
        verdict, reason = None, "reported, not gated (spec): " + reason
    low, high = wilson(kt, nt)
    return MetricResult(
        "memorisation", "down", "%", shares[0], shares[1], shares[1] - shares[0], threshold, "threshold",
        f"threshold: at most {threshold:g} % of tuned responses may hold a corpus span of {index.k} tokens",
        None, (100 * low, 100 * high), None, len(ids), verdict, reason,
        extra={
            "gated": spec.memorisation_gate,
            "k": index.k,
            "tokens": index.tokens_name,
            "corpus_tokens": index.num_tokens,
            "index": index.cached,
            "base_count": {"k": counts[0][0], "n": counts[0][1]},
            "tuned_count": {"k": kt, "n": nt},
            "longest_span": best,
            "spans": spans,
        },
    )  # fmt: skip


def overall(metrics: Mapping[str, MetricResult], probes: Sequence[ProbeResult]) -> str:
    judged = [m for m in metrics.values() if m.extra.get("gated", True) and not m.extra.get("skipped")]
    judged += [p.result for p in probes]
    verdicts = [m.verdict for m in judged]
    if FAIL in verdicts:
        return FAIL
    if INCONCLUSIVE in verdicts or None in verdicts or not verdicts:
        return INCONCLUSIVE
    return PASS


def _inputs(base: Arm, tuned: Arm, pairing: Pairing, spec: GateSpec) -> dict[str, Any]:
    def arm(a: Arm) -> dict[str, Any]:
        judged = sum(len(a.texts(run, p)) for run in a.run_names for p in pairing.prompt_ids)
        return {"files": list(a.sources), "runs": len(a.run_names), "responses": a.num_responses,
                "responses_judged": judged}  # fmt: skip

    return {
        "base": arm(base),
        "tuned": arm(tuned),
        "prompts": len(pairing.prompt_ids),
        "prompts_dropped": pairing.num_dropped,
        "floor_k": spec.floor_k,
    }
