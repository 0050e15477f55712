"""Benchmark results judged per document: planted effects in lm-eval's own row layout (the generator in
examples/gate/make_lm_eval.py), the single-run paired tests, power, groups, per-example files."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from tuneproof.gate.arms import read_arm
from tuneproof.gate.judge import judge_arms
from tuneproof.gate.spec import GateSpec, read_spec

ROOT = Path(__file__).parent.parent.parent
_spec = importlib.util.spec_from_file_location("make_lm_eval", ROOT / "examples" / "gate" / "make_lm_eval.py")
assert _spec and _spec.loader
gen = importlib.util.module_from_spec(_spec)
sys.modules["make_lm_eval"] = gen  # dataclasses look their module up
_spec.loader.exec_module(gen)

BASE = gen.Model("org/base", {"gsm8k": 0.3, "arc": 0.3})


def _runs(tmp: Path, arm: str, model, tasks, seeds, groups=None) -> list[Path]:  # type: ignore[no-untyped-def]
    return [
        gen.write_run(tmp / f"{arm}-{s}", tasks, model, s, f"2026-11-01T10-00-{i:02d}.000000", groups)
        for i, s in enumerate(seeds)
    ]


def _gate(base: list[Path], tuned: list[Path], spec: GateSpec | None = None):  # type: ignore[no-untyped-def]
    return judge_arms(read_arm(base, "base"), read_arm(tuned, "tuned"), spec)


def _line(report, task: str, metric: str = "exact_match", filt: str = "strict-match"):  # type: ignore[no-untyped-def]
    assert report.benchmarks is not None
    return next(
        x for x in report.benchmarks.lines if (x.unit.name, x.metric, x.filter) == (task, metric, filt)
    )


def test_a_clear_drop_fails_and_the_other_filter_is_evidence(tmp_path: Path) -> None:
    tasks = [gen.Task("gsm8k", 300, "generate")]
    worse = gen.Model("org/tuned", {"gsm8k": -0.6}, 1, ("gsm8k",))
    report = _gate(_runs(tmp_path, "b", BASE, tasks, (1, 2)), _runs(tmp_path, "t", worse, tasks, (3, 4)))
    strict, flexible = _line(report, "gsm8k"), _line(report, "gsm8k", filt="flexible-extract")
    assert strict.deciding and not flexible.deciding
    assert strict.result.verdict == "FAIL" and strict.result.delta < -10
    assert strict.result.ratio > 1 and strict.test == "clustered t" and strict.result.unit == "%"
    assert report.verdict == "FAIL" and "gsm8k exact_match (strict-match)" in report.judgement.reason
    assert report.benchmarks.notes == []  # lm-eval's aggregates equal the per-document means


def test_the_same_model_with_other_seeds_never_fails_in_95_of_100_trials(tmp_path: Path) -> None:
    tasks = [gen.Task("gsm8k", 150, "generate")]
    fails = 0
    for trial in range(100):
        folder = tmp_path / str(trial)
        base = _runs(folder, "b", BASE, tasks, (4 * trial, 4 * trial + 1))
        tuned = _runs(folder, "t", BASE, tasks, (4 * trial + 2, 4 * trial + 3))
        fails += _line(_gate(base, tuned), "gsm8k").result.verdict == "FAIL"
    assert fails <= 5


def _near_miss(tmp_path: Path):  # type: ignore[no-untyped-def]
    """An unchanged model on a 30-document task whose two arms differ by about 13 points by chance."""
    tasks = [gen.Task("small", 30, "generate")]
    for trial in range(200):
        folder = tmp_path / str(trial)
        base = _runs(folder, "b", BASE, tasks, (4 * trial, 4 * trial + 1))
        tuned = _runs(folder, "t", BASE, tasks, (4 * trial + 2, 4 * trial + 3))
        report = _gate(base, tuned)
        line = _line(report, "small")
        if 12 <= abs(line.result.delta) <= 14:
            return report, line, (base, tuned)
    raise AssertionError("no 13-point chance difference in 200 trials")


def test_the_near_miss_13_points_inside_twice_the_run_to_run_sd_is_inconclusive(tmp_path: Path) -> None:
    report, line, _ = _near_miss(tmp_path)
    assert line.result.floor > abs(line.result.delta)  # inside 2 x the run-to-run SD
    assert line.result.verdict == "INCONCLUSIVE" and report.verdict == "INCONCLUSIVE"
    assert line.power and "documents" in line.power


def test_the_near_miss_is_inconclusive_under_either_hypothesis(tmp_path: Path) -> None:
    from tuneproof.gate.spec import BenchSpec

    _, _, (base, tuned) = _near_miss(tmp_path)
    for hypothesis in ("better", "not-worse"):
        spec = GateSpec(benchmarks=BenchSpec(hypothesis=hypothesis))
        line = _line(_gate(base, tuned, spec), "small")
        assert line.hypothesis == hypothesis and line.result.verdict == "INCONCLUSIVE"


@pytest.mark.parametrize("seed", [3, 4, 5, 6])
def test_power_counts_the_documents_and_runs_that_would_detect_the_floor(seed: int) -> None:
    """The advice is the test as applied: its power now, and the documents or runs that give 80 %
    (tests/gate/test_gate_power.py follows the advice and measures it); never a count already taken."""
    import re

    from tuneproof.gate.bench_lineup import BenchUnit
    from tuneproof.gate.benchmarks import judge_line
    from tuneproof.gate.clustered import power

    rng = np.random.default_rng(seed)
    p = rng.uniform(0.2, 0.8, 40)
    base, tuned = (rng.random((2, 40)) < p).astype(float), (rng.random((2, 40)) < p).astype(float)
    unit = BenchUnit(name="small", kind="task", tasks=("small",), rows=(("none", "acc"),), top=True)
    line = judge_line(unit, "none", "acc", base, tuned, True, "not-worse", None, 2.0)
    assert line.result.verdict == "INCONCLUSIVE" and line.power is not None
    floor = line.result.floor
    now = power(floor, line.extra["se"], line.extra["df"])
    assert line.power.startswith(f"a {floor:.3g} pts effect (the measured run-to-run floor) is detected "
                                 f"{100 * now:.0f} % of the time here")  # fmt: skip
    if now >= 0.8:
        assert line.power.endswith(
            "lies nearer the line the verdict must clear, where these data cannot decide"
        )
        return
    docs = re.search(r"about ([\d,]+) documents at these runs \(now 40\)", line.power)
    runs = re.search(r"(\d+) runs per arm at these documents \(now 2 \+ 2\)", line.power)
    assert docs is not None or runs is not None, line.power
    assert docs is None or int(docs.group(1).replace(",", "")) > 40
    assert runs is None or int(runs.group(1)) > 2


def test_one_run_per_arm_uses_exact_mcnemar_and_says_so(tmp_path: Path) -> None:
    tasks = [gen.Task("gsm8k", 400, "generate")]
    worse = gen.Model("org/tuned", {"gsm8k": -1.0}, 1, ("gsm8k",))
    report = _gate(_runs(tmp_path, "b", BASE, tasks, (1,)), _runs(tmp_path, "t", worse, tasks, (2,)))
    line = _line(report, "gsm8k")
    assert line.test == "exact McNemar" and line.result.floor is None
    assert line.result.verdict == "FAIL" and line.extra["mcnemar_p"] < 1e-6
    assert (
        "1 run per arm, so the run-to-run noise is not measured and the exact McNemar decides"
        in line.result.reason
    )
    same = _gate(_runs(tmp_path, "b2", BASE, tasks, (5,)), _runs(tmp_path, "t2", BASE, tasks, (6,)))
    assert _line(same, "gsm8k").result.verdict != "FAIL"


def test_one_run_of_a_graded_metric_uses_the_paired_bootstrap(tmp_path: Path) -> None:
    from tuneproof.gate.bench_lineup import BenchUnit
    from tuneproof.gate.benchmarks import judge_line

    rng = np.random.default_rng(0)
    base = rng.uniform(0.3, 0.9, (1, 200))  # in [0, 1]: judged in points
    unit = BenchUnit(
        name="rouge_task", kind="task", tasks=("rouge_task",), rows=(("none", "rougeL"),), top=True
    )
    drop = judge_line(unit, "none", "rougeL", base, base - 0.2, True, "not-worse", 5.0, 2.0)
    assert drop.test == "paired bootstrap" and drop.result.verdict == "FAIL"
    up = judge_line(unit, "none", "rougeL", base, np.minimum(base + 0.1, 1), True, "better", None, 2.0)
    assert up.result.verdict == "PASS"


def test_lower_is_better_metrics_turn_the_verdict(tmp_path: Path) -> None:
    from tuneproof.gate.bench_lineup import BenchUnit
    from tuneproof.gate.benchmarks import judge_line

    unit = BenchUnit(name="wiki", kind="task", tasks=("wiki",), rows=(("none", "word_perplexity"),), top=True)
    base = np.array([[10.0, 12.0, 11.0, 9.0] * 25, [10.5, 11.5, 11.0, 9.5] * 25])
    line = judge_line(unit, "none", "word_perplexity", base, base + 3.0, False, "not-worse", None, 2.0)
    assert line.result.unit == "" and line.result.verdict == "FAIL"


def test_groups_pool_their_subtasks_and_decide_while_subtasks_are_evidence(tmp_path: Path) -> None:
    tasks = [gen.Task(f"mmlu_{n}", 80, "choice", i) for i, n in enumerate(("law", "math", "art"))]
    groups = {"mmlu": [t.name for t in tasks]}
    tuned = gen.Model(
        "org/tuned", {"mmlu_law": -1.5, "mmlu_math": -1.5, "mmlu_art": -1.5}, 1, tuple(groups["mmlu"])
    )
    report = _gate(
        _runs(tmp_path, "b", BASE, tasks, (1, 2), groups), _runs(tmp_path, "t", tuned, tasks, (3, 4), groups)
    )
    group = _line(report, "mmlu", "acc", "none")
    assert group.unit.kind == "group" and group.deciding and group.result.num_prompts == 240
    subs = [x for x in report.benchmarks.lines if x.unit.kind == "subtask"]
    assert {x.unit.name for x in subs} == set(groups["mmlu"]) and not any(x.deciding for x in subs)
    assert group.result.verdict == "FAIL"
    assert report.benchmarks.notes == []  # the pooled mean is lm-eval's group figure
    assert group.lm_eval["base"][0] == pytest.approx(group.result.base, abs=20)


def test_a_spec_picks_the_deciding_filter_the_hypothesis_and_the_margin(tmp_path: Path) -> None:
    tasks = [gen.Task("gsm8k", 300, "generate")]
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(
        '[benchmarks]\nmargin = 30.0\n[benchmarks.task.gsm8k]\nfilter = "flexible-extract"\n'
    )
    worse = gen.Model("org/tuned", {"gsm8k": -0.6}, 1, ("gsm8k",))
    report = _gate(
        _runs(tmp_path, "b", BASE, tasks, (1, 2)),
        _runs(tmp_path, "t", worse, tasks, (3, 4)),
        read_spec(spec_file),
    )
    flexible = _line(report, "gsm8k", filt="flexible-extract")
    assert flexible.deciding and flexible.margin == 30.0
    assert flexible.result.verdict == "PASS"  # a 15-point drop is within the 30-point margin
    assert "not worse by more than 30" in flexible.result.reason


def test_per_example_csv_and_jsonl_are_judged_like_lm_eval(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    paths = []
    for arm, p in (("b", 0.7), ("t", 0.4)):
        for run in range(2):
            hits = rng.random(200) < p
            f = tmp_path / f"{arm}{run}.csv"
            f.write_text("id,task,exact_match\n" + "".join(f"q{i},qa,{int(h)}\n" for i, h in enumerate(hits)))
            paths.append(f)
    j = tmp_path / "t9.jsonl"
    j.write_text(
        "".join(json.dumps({"id": f"q{i}", "task": "qa", "exact_match": 0}) + "\n" for i in range(200))
    )
    report = _gate(paths[:2], paths[2:])
    line = _line(report, "qa", filt="none")
    assert line.result.verdict == "FAIL" and "direction" not in line.extra  # exact_match: in the table
    assert _line(_gate(paths[:1], [j]), "qa", filt="none").result.verdict == "FAIL"


def test_a_metric_without_per_document_numbers_is_named_not_judged(tmp_path: Path) -> None:
    folder = tmp_path / "r"
    folder.mkdir()
    bleu = {"metrics": ["bleu", "acc"], "bleu": [["ref"], "pred"]}
    rows = [{"doc_id": i, "filter": "none", **bleu, "acc": i % 2} for i in range(6)]
    (folder / "samples_wmt_2026-01-01T00-00-00.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = _gate([folder], [folder])
    assert any("bleu (none) not judged: list per document" in n for n in report.benchmarks.notes)
    assert math.isclose(_line(report, "wmt", "acc", "none").result.delta, 0.0)


UNIT_ARGS = {"name": "small", "kind": "task", "tasks": ("small",), "rows": (("none", "acc"),), "top": True}


def _judge(base, tuned, higher=True, hypothesis="not-worse", margin=None, bar=None):  # type: ignore[no-untyped-def]
    from tuneproof.gate.bench_lineup import BenchUnit
    from tuneproof.gate.benchmarks import judge_line

    return judge_line(BenchUnit(**UNIT_ARGS), "none", "acc", np.asarray(base, float),
                      np.asarray(tuned, float), higher, hypothesis, margin, 2.0, bar)  # fmt: skip


def test_mcnemar_that_does_not_reject_says_so_where_the_interval_excludes_0() -> None:
    """Fresh eyes (issue 33): 40 documents, one run each, 7 worse and 0 better: the bootstrap interval lies
    below 0 but McNemar's p is 0.016... with 5 vs 0, p = 0.0625: the reason said "the interval spans 0"."""
    base = np.ones((1, 40))
    tuned = base.copy()
    tuned[0, :5] = 0
    line = _judge(base, tuned)
    assert line.result.verdict == "INCONCLUSIVE" and line.extra["mcnemar_p"] == pytest.approx(0.0625)
    assert line.result.ci95 is not None and line.result.ci95[1] < 0
    assert "the exact McNemar test, which decides with one run per arm, does not reject" in line.result.reason
    assert "spans 0" not in line.result.reason


def test_better_by_a_margin_plans_for_what_it_must_clear() -> None:
    """Fresh eyes (issue 33): "better" with a 5-point margin needs the interval above +5, but the power
    line was the power against 0 (41 %). Now: an effect the size of the margin is called half the time at
    best (no count advised), a larger one is planned past the margin, and the MDE lies beyond it."""
    import re

    from tuneproof.gate.clustered import power

    rng = np.random.default_rng(1)
    p = rng.uniform(0.2, 0.8, 300)
    base, tuned = (rng.random((2, 300)) < p), (rng.random((2, 300)) < p)
    line = _judge(base, tuned, hypothesis="better", margin=5.0)
    assert line.result.verdict == "INCONCLUSIVE" and line.power is not None
    effect = float(re.match(r"a ([\d.]+) pts effect", line.power).group(1))  # type: ignore[union-attr]
    assert effect > 5.0  # the measured floor, larger than the margin
    now = power(effect - 5.0, line.extra["se"], line.extra["df"])
    assert f"detected {100 * now:.0f} % of the time here" in line.power
    assert line.result.mde is not None and line.result.mde > 5.0 + line.extra["se"]
    quiet = _judge(base[:1], tuned[:1], hypothesis="better", margin=5.0)  # no measured floor: the margin
    assert (
        quiet.power is not None and "(the margin)" in quiet.power and "half the time at best" in quiet.power
    )


def test_a_verdict_holm_demotes_gets_its_power_at_holms_first_step(tmp_path: Path) -> None:
    """Fresh eyes: a line FAIL alone but not after Holm had no power line, and the others' power was
    the uncorrected figure."""
    tasks = [gen.Task(n, 120, "generate") for n in ("t1", "t2", "t3", "t4")]
    base_model = gen.Model("org/base", {n: 0.3 for n in ("t1", "t2", "t3", "t4")})
    tuned_model = gen.Model("org/tuned", {"t1": -0.35}, 1, ("t1",))
    report = _gate(
        _runs(tmp_path, "b", base_model, tasks, (1, 2)), _runs(tmp_path, "t", tuned_model, tasks, (3, 4))
    )
    lines = [x for x in report.benchmarks.lines if x.deciding]
    assert len(lines) == 4
    for x in lines:
        if x.result.verdict == "INCONCLUSIVE":
            assert x.power is not None and "at alpha 0.05 / 4 (Holm's first step over 4" in x.power, x.power
    assert any(x.result.verdict == "INCONCLUSIVE" for x in lines)
    # a line FAIL alone (p about 0.02) among three null lines: demoted by Holm, and given its power line
    from tuneproof.gate.bench_lineup import BenchUnit
    from tuneproof.gate.benchmarks import Benchmarks, judge_line
    from tuneproof.gate.judge import overall

    rng = np.random.default_rng(20)  # a draw whose drop is significant alone (p = 0.030)
    p = rng.uniform(0.3, 0.7, 200)
    family = []
    for i, drop in enumerate((0.1, 0.0, 0.0, 0.0)):
        b, t = (rng.random((2, 200)) < p).astype(float), (rng.random((2, 200)) < p - drop).astype(float)
        unit = BenchUnit(name=f"t{i}", kind="task", tasks=(f"t{i}",), rows=(("none", "acc"),), top=True)
        family.append(judge_line(unit, "none", "acc", b, t, True, "not-worse", None, 2.0))
        family[-1].deciding = True
    alone = family[0].result.extra["p_value"]
    assert family[0].result.verdict == "FAIL" and family[0].power is None and 0.0125 < alone < 0.05, alone
    overall({}, [], Benchmarks(family, [], True))
    assert "not after Holm" in family[0].result.reason
    assert family[0].power is not None and "alpha 0.05 / 4" in family[0].power


def test_an_unknown_direction_shows_no_arrow_and_names_the_spec_key() -> None:
    line = _judge(np.full((2, 10), 0.5), np.full((2, 10), 0.4), higher=None)
    assert line.result.wanted == "unknown"


def test_a_spec_floor_is_the_floor_the_table_shows() -> None:
    rng = np.random.default_rng(2)
    base = (rng.random((2, 200)) < 0.5).astype(float)
    line = _judge(base, base.copy(), bar=10.0)
    assert line.result.floor == 10.0 and line.result.floor_source == "given"


def test_lower_is_better_reads_as_measured_and_the_runs_advice_names_the_single_arm() -> None:
    """The text gives the change as measured with its direction ("lower is better"), and a worse change
    is "the interval above 0"; with 1 base run and 3 tuned runs the advice is a second base run."""
    base = np.array([[0.1, 0.2, 0.0, 0.1] * 25, [0.1, 0.1, 0.0, 0.2] * 25])
    worse = _judge(base, base + 0.3, higher=False)
    assert worse.result.verdict == "FAIL" and "(lower is better)" in worse.result.reason
    assert "the interval above 0" in worse.result.reason
    rng = np.random.default_rng(3)
    p = rng.uniform(0.2, 0.8, 60)
    one = _judge((rng.random((1, 60)) < p), (rng.random((3, 60)) < p), hypothesis="not-worse", margin=3.0)
    assert one.power is not None and "a second run in the base arm would measure" in one.power
    assert "2 runs per arm" not in one.power


def test_better_by_a_margin_gives_holm_the_p_value_against_the_margin() -> None:
    """Review: a "better by more than 5" PASS gave Holm its p-value against 0, so the correction could
    never demote a claim that only just cleared the margin."""
    from scipy import stats as sps

    rng = np.random.default_rng(4)
    p = rng.uniform(0.2, 0.6, 400)
    base, tuned = (rng.random((3, 400)) < p), (rng.random((3, 400)) < p + 0.15)
    line = _judge(base, tuned, hypothesis="better", margin=5.0)
    assert line.result.verdict == "PASS"
    gain, se, df = line.result.delta, line.extra["se"], line.extra["df"]
    assert line.result.extra["p_value"] == pytest.approx(2 * sps.t.sf((gain - 5.0) / se, df))
    assert line.result.extra["p_value"] > 2 * sps.t.sf(gain / se, df)
