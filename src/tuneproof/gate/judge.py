"""The gate: tuned vs base on every metric family, each judged against the instrument's measured noise.

`check_inputs` (gate/checks.py) refuses what cannot be judged before any work starts; `measure` computes
the families and probes (`judge_arms` is the two in one call); the overall verdict (`overall`, a
`tuneproof.core.verdict.Verdict`) is FAIL when any judged metric fails, INCONCLUSIVE when none fails
but one is inconclusive or could not be judged, PASS when every judged metric passes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tuneproof.core.verdict import Verdict
from tuneproof.gate import stats
from tuneproof.gate.arms import Arm, Pairing
from tuneproof.gate.attractors import PhraseMatcher, attractor_scores
from tuneproof.gate.checks import check_inputs
from tuneproof.gate.diversity import WANTED as DIVERSITY_WANTED
from tuneproof.gate.diversity import Embedder, diversity_scores
from tuneproof.gate.memorise import KGramIndex, build_index, query, span_text
from tuneproof.gate.metrics import ATTRACTORS, DIVERSITY, MEMORISATION, METRIC_FAMILIES
from tuneproof.gate.probes import EXPECT, Probe, mcnemar_exact, probe_outcome, wilson
from tuneproof.gate.spec import GateSpec
from tuneproof.gate.stats import FAIL, INCONCLUSIVE, PASS, Floor, MetricResult, verdict_for
from tuneproof.gate.tokens import Tokens

if TYPE_CHECKING:
    from tuneproof.gate.benchmarks import Benchmarks

SPAN_TEXTS = 20  # tuned responses whose corpus span is quoted (all are listed)


@dataclass(kw_only=True)
class JudgedProbe:
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


@dataclass(kw_only=True)
class GateReport:
    """Every metric and probe, the overall verdict (`judgement`) and what was judged. `verdict` and
    `exit_code` read the judgement as the JSON report writes them."""

    metrics: dict[str, MetricResult]
    probes: list[JudgedProbe]
    judgement: Verdict
    inputs: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    benchmarks: Benchmarks | None = None

    @property
    def verdict(self) -> str:
        return self.judgement.outcome

    @property
    def exit_code(self) -> int:
        return self.judgement.exit_code

    def to_dict(self) -> dict[str, Any]:
        return {
            "metrics": {k: v.to_dict() for k, v in self.metrics.items()},
            "probes": [p.to_dict() for p in self.probes],
            "benchmarks": None
            if self.benchmarks is None
            else {
                "gated": self.benchmarks.gated,
                "lines": [line.to_dict() for line in self.benchmarks.lines],
                "notes": self.benchmarks.notes,
            },
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "inputs": self.inputs,
            "notes": self.notes,
        }


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
    practical: bool = False,
) -> MetricResult:
    """One family: every part judged (its floor shown, beaten too where `practical`); the headline part
    decides (when gated)."""
    results = {}
    for part, (b, t) in parts.items():
        key = name if part == headline else f"{name}.{part}"
        unit = units.get(part, "")
        floor = _floor(key, b, t, k, given, unit)
        results[part] = stats.judge_metric(part, wanted[part], b, t, floor, unit=unit, practical=practical)
    family = replace(results[headline], name=name)
    family.extra = {"metric": headline, "gated": gate}
    family.parts = [r for p, r in results.items() if p != headline]
    if not gate:
        family.prefix_reason("reported, not gated (spec): ")
    return family


def _skipped(name: str, wanted: str, reason: str) -> MetricResult:
    return MetricResult(
        name=name, wanted=wanted, unit="", base=None, tuned=None, delta=None, floor=None, floor_source="none",
        floor_detail=reason, ratio=None, ci95=None, mde=None, num_prompts=0, judgement=None, note=reason,
        extra={"skipped": True},
    )  # fmt: skip


def judge_arms(
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
    """The gate in one call: `check_inputs`, then `measure`."""
    spec = spec or GateSpec()
    given = dict(given_floors or {})
    pairing = check_inputs(base, tuned, spec, given, attractors is not None, probes, embed is not None)
    return measure(
        base, tuned, pairing, spec, attractors=attractors, corpus=corpus, tokens=tokens, probes=probes,
        embed=embed, given_floors=given, progress=progress,
    )  # fmt: skip


NO_CORPUS = "skipped: no training corpus given"
NO_LIST = "skipped: no attractor list given (tuneproof attractors mine makes one)"


def measure(
    base: Arm,
    tuned: Arm,
    pairing: Pairing,
    spec: GateSpec,
    *,
    attractors: tuple[PhraseMatcher, str] | None = None,
    corpus: Sequence[str | Path] = (),
    tokens: Tokens | None = None,
    probes: Sequence[Probe] = (),
    embed: Embedder | None = None,
    given_floors: Mapping[str, float] | None = None,
    progress: Callable[[str], None] | None = None,
) -> GateReport:
    """Every family and probe on arms `check_inputs` has passed (its `pairing`), and the overall verdict."""
    given = dict(given_floors or {})
    say = progress or (lambda _m: None)
    ids = pairing.prompt_ids
    notes = [n for n in [pairing.note()] if n]
    k = spec.floor_k
    # beside benchmark runs, diversity is measured only when the spec's [diversity] says gate
    diversity_asked = pairing.lineup is None or spec.diversity.gate is not None
    spec = spec.for_benchmarks(pairing.lineup is not None)
    benchmarks = None
    if pairing.lineup is not None:
        from tuneproof.gate.benchmarks import judge_benchmarks

        say("benchmarks")
        benchmarks = judge_benchmarks(pairing.lineup, spec)
        if not ids:
            no_text = (
                "skipped: the benchmark runs hold no response text (loglikelihood tasks, per-example files)"
            )
            metrics = {n: _skipped(n, "down", no_text) for n in METRIC_FAMILIES}
            report = GateReport(metrics=metrics, probes=[], judgement=overall(metrics, [], benchmarks, notes),
                                inputs={}, notes=notes, benchmarks=benchmarks)  # fmt: skip
            report.inputs = _inputs(base, tuned, pairing, spec)
            return report

    if diversity_asked:
        say(DIVERSITY.name)
        metrics = {DIVERSITY.name: _diversity(base, tuned, ids, spec, embed, given, notes)}
    else:
        why = "skipped beside benchmark runs (gate = true under [diversity] in the spec measures them)"
        metrics = {DIVERSITY.name: _skipped(DIVERSITY.name, DIVERSITY.wanted, why)}
    if attractors is None:
        metrics[ATTRACTORS.name] = _skipped(
            ATTRACTORS.name, spec.attractors.wanted or ATTRACTORS.wanted, NO_LIST
        )
    else:
        say(ATTRACTORS.name)
        metrics[ATTRACTORS.name] = _attractors(base, tuned, ids, spec, attractors, given)

    if not corpus:
        metrics[MEMORISATION.name] = _skipped(MEMORISATION.name, MEMORISATION.wanted, NO_CORPUS)
    else:
        index = build_index(corpus, spec.k, tokens, progress=say)
        say(f"{MEMORISATION.name}: querying")
        metrics[MEMORISATION.name] = memorisation(base, tuned, ids, index, tokens or Tokens(), spec)

    for arm in (base, tuned):
        empty = sum(1 for r in arm.responses() if not r.text.strip())
        if empty:
            notes.append(f"{empty} of {arm.num_responses} {arm.name} responses are empty")
    results = []
    for probe in probes:
        say(f"probe {probe.name}")
        results.append(judge_probe(probe, base, tuned, ids, k, given, spec.practical_floor))
        if results[-1].missing:
            notes.append(
                f"probe {probe.name}: {len(results[-1].missing)} of its prompts are not in both arms "
                "(judged on the rest)"
            )
    judgement = overall(metrics, results, benchmarks, notes)
    return GateReport(metrics=metrics, probes=results, judgement=judgement,
                      inputs=_inputs(base, tuned, pairing, spec), notes=notes,
                      benchmarks=benchmarks)  # fmt: skip


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
        DIVERSITY.name,
        div.scores,
        spec.diversity.metric,
        wanted,
        spec.floor_k,
        given,
        {},
        spec.diversity.gate is not False,
        spec.practical_floor,
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
    direction = spec.attractors.wanted or ATTRACTORS.wanted
    family = _family(
        ATTRACTORS.name,
        {"share": scores.share, "per_1k_words": scores.per_1k_words},
        spec.attractors.metric,
        {"share": direction, "per_1k_words": direction},
        spec.floor_k,
        given,
        {"share": "%", "per_1k_words": "/1k words"},
        spec.attractors.gate is not False,
        spec.practical_floor,
    )
    family.extra.update(
        list_sha256=sha,
        num_phrases=len(matcher.phrases),
        top_phrases=[{"phrase": p, "base": b, "tuned": t} for p, b, t in scores.top],
    )
    return family


def judge_probe(
    probe: Probe,
    base: Arm,
    tuned: Arm,
    ids: list[str],
    k: float,
    given: Mapping[str, float],
    practical: bool = False,
) -> JudgedProbe:
    out = probe_outcome(probe, base, tuned, ids)
    b, t = out.rates
    p_value = mcnemar_exact(*out.discordant)
    floor = _floor(f"probe:{probe.name}", b, t, k, given, "%")
    result = stats.judge_metric(
        probe.name,
        EXPECT[probe.expect],
        b,
        t,
        floor,
        unit="%",
        test=("McNemar", p_value),
        practical=practical,
    )
    (kb, nb), (kt, nt) = out.counts
    for k_, n_, what in ((0, 0, "no"), (nb, nt, "every")):
        if kb == k_ and kt == n_:
            judged = result.judgement
            result.judgement = verdict_for(
                INCONCLUSIVE,
                f"the detector fires on {what} response in both arms, so it cannot tell them apart "
                "(check its regex or phrases against a few responses)",
                judged.margin if judged else None,
                judged.noise if judged else None,
            )
    return JudgedProbe(probe=probe, result=result, counts=out.counts, mcnemar_p=p_value, missing=out.missing)


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
    reason = f"{kt} of {nt} tuned responses hold a {index.k}-token corpus span (threshold {threshold:g} %)"
    if shares[1] > threshold:
        assert best is not None
        reason += f"; longest: {best['tokens']} tokens in prompt {best['prompt_id']!r}"
    # margin: the tuned share's distance above the threshold (points; > 0 fails); a threshold is no noise
    judged: Verdict | None = verdict_for(
        PASS if shares[1] <= threshold else FAIL, reason, margin=shares[1] - threshold
    )
    note = ""
    if not spec.memorisation_gate:
        judged, note = None, "reported, not gated (spec): " + reason
    low, high = wilson(kt, nt)
    return MetricResult(
        name=MEMORISATION.name, wanted=MEMORISATION.wanted, unit=MEMORISATION.unit, base=shares[0],
        tuned=shares[1], delta=shares[1] - shares[0], floor=threshold, floor_source="threshold",
        floor_detail=f"threshold: at most {threshold:g} % of tuned responses may hold a corpus span of "
        f"{index.k} tokens",
        ratio=None, ci95=(100 * low, 100 * high), mde=None, num_prompts=len(ids), judgement=judged, note=note,
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


def overall(
    metrics: Mapping[str, MetricResult],
    probes: Sequence[JudgedProbe],
    benchmarks: Benchmarks | None = None,
    notes: list[str] | None = None,
) -> Verdict:
    """FAIL when a gated metric, a probe or a deciding benchmark line fails; INCONCLUSIVE when none fails
    but one is undecided or not judged, or nothing is gated; PASS when every one passes. The reason names
    them. The deciding verdicts are first corrected together (Holm); its note goes to `notes`."""
    judged = {n: m for n, m in metrics.items() if m.extra.get("gated", True) and not m.extra.get("skipped")}
    judged.update({f"probe {p.probe.name}": p.result for p in probes})
    judged.update({line.name: line.result for line in (benchmarks.deciding() if benchmarks else [])})
    (notes if notes is not None else []).extend(stats.holm_correct(judged))
    family = len(stats.holm_family(judged))
    for line in benchmarks.deciding() if benchmarks else []:
        if line.result.verdict == INCONCLUSIVE and line.plan is not None:  # Holm may have demoted it
            line.power = line.plan(max(family, 1))
    failed = [n for n, m in judged.items() if m.verdict == FAIL]
    if failed:
        return verdict_for(FAIL, "failed: " + ", ".join(failed))
    undecided = [n for n, m in judged.items() if m.verdict != PASS]  # inconclusive, or not judged
    if undecided:
        return verdict_for(INCONCLUSIVE, "none failed; not decided: " + ", ".join(undecided))
    if not judged:
        return verdict_for(INCONCLUSIVE, "nothing is gated: the spec reports every metric without judging it")
    return verdict_for(PASS, "every gated metric passed: " + ", ".join(judged))


def _inputs(base: Arm, tuned: Arm, pairing: Pairing, spec: GateSpec) -> dict[str, Any]:
    def arm(a: Arm) -> dict[str, Any]:
        judged = sum(len(a.texts(run, p)) for run in a.run_names for p in pairing.prompt_ids)
        return {"files": list(a.sources), "runs": len(a.run_names), "responses": a.num_responses,
                "responses_judged": judged}  # fmt: skip

    lineup = pairing.lineup
    return {
        "base": arm(base),
        "tuned": arm(tuned),
        "benchmark_runs": None if lineup is None else {"base": len(lineup.base), "tuned": len(lineup.tuned)},
        "benchmark_documents": None if lineup is None else {t: len(d) for t, d in lineup.docs.items()},
        "prompts": len(pairing.prompt_ids),
        "prompts_dropped": pairing.num_dropped,
        "floor_k": spec.floor_k,
        "practical_floor": spec.practical_floor,
    }
