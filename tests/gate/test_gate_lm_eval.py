"""lm-eval's own output files (tests/data/lm_eval, provenance in tests/data/README.md) and every refusal
of benchmark input: one line, exit 2, before any judging."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError
from tuneproof.gate.arms import read_arm
from tuneproof.gate.judge import judge_arms
from tuneproof.gate.lm_eval import read_run

ROOT = Path(__file__).parent.parent.parent
DATA = Path(__file__).parent.parent / "data" / "lm_eval"
_spec = importlib.util.spec_from_file_location(
    "make_lm_eval_", ROOT / "examples" / "gate" / "make_lm_eval.py"
)
assert _spec and _spec.loader
gen = importlib.util.module_from_spec(_spec)
sys.modules["make_lm_eval_"] = gen
_spec.loader.exec_module(gen)

COMPLETE = ["dsthesis_gsm8k_phi3mini_limit10", "dsthesis_gsm8k_phi3mini_limit1", "dsthesis_gsm8k_gpt2_limit1"]


@pytest.mark.parametrize("folder", COMPLETE)
def test_the_per_document_mean_is_lm_evals_own_aggregate_on_real_runs(folder: str) -> None:
    run = read_run(DATA / folder, "base", folder)
    rows = {k: v for k, v in run.scores.items()}
    assert {f for _, f, _ in rows} == {"strict-match", "flexible-extract"}  # two rows per document
    for key, docs in rows.items():
        assert sum(docs.values()) / len(docs) == pytest.approx(run.aggregates[key], abs=1e-12)
    assert run.higher[("gsm8k", "exact_match")] is True and run.version == "0.4.9.1"
    assert all(len(t) == 1 for t in run.texts.values())  # the raw response once per document


def test_a_two_filter_gsm8k_file_is_no_longer_refused(tmp_path: Path, capsys) -> None:
    samples = next((DATA / COMPLETE[0]).glob("samples_gsm8k_*.jsonl"))
    again = tmp_path / samples.name  # the same run's scores in another file, written again (a byte copy
    # is refused: the gate would judge a file against itself)
    again.write_text(
        "".join(
            json.dumps(json.loads(x), separators=(",", ":")) + "\n" for x in samples.read_text().splitlines()
        )
    )
    code = main(["gate", "--base", str(samples), "--tuned", str(again), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0  # identical scores on every document: no difference, so not worse
    lines = {(x["filter"], x["metric"]): x for x in out["benchmarks"]["lines"]}
    assert set(lines) == {("strict-match", "exact_match"), ("flexible-extract", "exact_match")}
    assert (
        lines[("strict-match", "exact_match")]["delta"] == 0
        and lines[("strict-match", "exact_match")]["deciding"]
    )
    assert lines[("strict-match", "exact_match")]["test"] == "exact McNemar"


def test_a_real_run_pair_is_judged_and_its_aggregates_shown(tmp_path: Path, capsys, monkeypatch) -> None:
    import shutil

    monkeypatch.setenv("COLUMNS", "120")
    base, tuned = DATA / COMPLETE[0], tmp_path / "tuned"
    shutil.copytree(base, tuned)
    assert main(["gate", "--base", str(base), "--tuned", str(tuned)]) == 0
    out = capsys.readouterr().out
    assert "gsm8k exact_match (strict-match)" in out and "no difference" in out
    assert "lm-eval's own figures per run: base 10.0; tuned 10.0" in out


def test_excerpted_samples_are_called_out_against_the_results_file() -> None:
    u1 = DATA / "pyfade_gsm8k_gemma3_12b_u1_limit100_excerpt"
    base = DATA / "pyfade_gsm8k_gemma3_12b_base_limit100_excerpt"
    report = judge_arms(read_arm([base], "base"), read_arm([u1], "tuned"))
    assert report.benchmarks is not None
    notes = " ".join(report.benchmarks.notes)
    # the repository kept 3 of the run's 100 documents: their mean is not lm-eval's 0.75 / 0.77
    assert "lm-eval's aggregate 77 differs from the per-document mean 66.6667" in notes
    assert "lm-eval's aggregate 75 differs from the per-document mean 33.3333" in notes
    line = report.benchmarks.lines[0]
    assert line.result.num_prompts == 3 and line.extra["lm_eval_differs"]


@pytest.mark.parametrize(
    "folder,fragment",
    [
        ("pyfade_mmlu_pro_plus_gemma3_12b_u2_limit100_excerpt", "has no samples for mmlu_pro_plus_biology"),
        (
            "leaderboard_llama31_8b_instruct_results_only",
            "has no samples for hellaswag, leaderboard_bbh_boolean_expressions",
        ),
        ("eee_math_perturbed_qwen3_93m_excerpt", "has no samples for math_rephrased_full"),
    ],
)
def test_a_results_file_without_its_samples_is_refused_in_one_line(
    folder: str, fragment: str, capsys
) -> None:
    code = main(["gate", "--base", str(DATA / folder), "--tuned", str(DATA / folder)])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and "log_samples" in err
    assert err.count("\n") == 1 and "Traceback" not in err


TASK = [gen.Task("gsm8k", 40, "generate")]
MODEL = gen.Model("org/m", {"gsm8k": 0.2})


def _run(folder: Path, seed: int = 1, tasks=TASK, date: str = "2026-11-01T10-00-00.000000") -> Path:  # type: ignore[no-untyped-def]
    return gen.write_run(folder, tasks, MODEL, seed, date)


def _refused(argv: list[str], capsys) -> str:  # type: ignore[no-untyped-def]
    code = main(["gate", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    return err


def _samples(folder: Path) -> Path:
    return next(folder.glob("*/samples_*.jsonl"))


def test_documents_that_do_not_match_between_arms_are_counted(tmp_path: Path, capsys) -> None:
    b = _run(tmp_path / "b")
    t = gen.write_run(
        tmp_path / "t", [gen.Task("gsm8k", 30, "generate")], MODEL, 2, "2026-11-01T10-00-00.000000"
    )
    err = _refused(["--base", str(b), "--tuned", str(t)], capsys)
    assert (
        "gsm8k: the documents do not match between the arms: 40 in run b (base), 30 in run t (tuned)" in err
    )
    assert "10 only in the first, 0 only in the second" in err


def test_runs_holding_other_tasks_are_refused(tmp_path: Path, capsys) -> None:
    b1 = _run(tmp_path / "b1")
    b2 = gen.write_run(
        tmp_path / "b2", [gen.Task("arc", 40, "choice")], MODEL, 2, "2026-11-02T10-00-00.000000"
    )
    err = _refused(["--base", str(b1), "--base", str(b2), "--tuned", str(b1)], capsys)
    assert "run b2 of the base arm holds arc; run b1 of the base arm holds gsm8k" in err
    # two samples files of different tasks given as two runs: the same refusal
    err = _refused(["--base", str(_samples(b1)), "--base", str(_samples(b2)), "--tuned", str(b1)], capsys)
    assert "holds arc" in err and "one lm-eval output folder" in err


def test_a_nan_metric_is_refused_with_its_line(tmp_path: Path, capsys) -> None:
    b = _run(tmp_path / "b")
    p = _samples(b)
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    rows[3]["exact_match"] = float("nan")
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    err = _refused(["--base", str(b), "--tuned", str(b)], capsys)
    assert "line 4: exact_match of doc 3 is nan" in err


def test_a_folder_holding_two_runs_and_a_missing_samples_file_are_refused(tmp_path: Path, capsys) -> None:
    b = _run(tmp_path / "b")
    _run(tmp_path / "b", seed=2, date="2026-11-02T10-00-00.000000")
    err = _refused(["--base", str(b), "--tuned", str(b)], capsys)
    assert "holds 2 lm-eval runs (dates 2026-11-01T10-00-00.000000, 2026-11-02T10-00-00.000000)" in err
    c = _run(tmp_path / "c")
    _samples(c).unlink()
    err = _refused(["--base", str(c), "--tuned", str(c)], capsys)
    assert "has no samples for gsm8k" in err


def test_another_document_under_the_same_doc_id_is_refused(tmp_path: Path, capsys) -> None:
    b, t = _run(tmp_path / "b"), _run(tmp_path / "t", seed=2)
    p = _samples(t)
    p.write_text(p.read_text().replace('"doc_hash": "', '"doc_hash": "x', 1))
    err = _refused(["--base", str(b), "--tuned", str(t)], capsys)
    assert "1 documents have another doc_hash in run t (tuned)" in err and "gsm8k doc 0" in err


def test_a_doc_id_twice_in_one_filter_is_refused(tmp_path: Path, capsys) -> None:
    b = _run(tmp_path / "b")
    p = _samples(b)
    first = p.read_text().splitlines()[0]
    p.write_text(p.read_text() + first + "\n")
    err = _refused(["--base", str(b), "--tuned", str(b)], capsys)
    assert "doc '0' appears twice for gsm8k filter 'strict-match'" in err


def test_benchmark_runs_and_response_files_do_not_mix(tmp_path: Path, capsys) -> None:
    b = _run(tmp_path / "b")
    text = tmp_path / "arm.jsonl"
    text.write_text(json.dumps({"prompt_id": "p", "run": 0, "sample": 0, "text": "hi"}) + "\n")
    assert "holds benchmark runs and the tuned arm response files" in _refused(
        ["--base", str(b), "--tuned", str(text)], capsys
    )
    assert "mixes tuneproof arm files with benchmark results" in _refused(
        ["--base", str(b), "--base", str(text), "--tuned", str(b)], capsys
    )


@pytest.mark.parametrize(
    "spec,fragment",
    [
        ('[benchmarks]\nhypothesis = "same"\n', "hypothesis = 'same'"),
        ('[benchmarks]\nmargin = "500_000"\n', "margin must be a finite number >= 0, got '500_000'"),
        ("[benchmarks]\nmargin = nan\n", "margin must be a finite number >= 0, got nan"),
        ("[benchmarks]\nmargin = inf\n", "margin must be a finite number >= 0, got inf"),
        ("[benchmarks]\nlevel = 1\n", "[benchmarks] has unknown key(s) level"),
        ('[benchmarks.task.mmlu]\nhypothesis = "better"\n', "names mmlu, which the runs do not hold"),
        (
            '[benchmarks.task.gsm8k]\nmetric = "acc"\n',
            "names metric 'acc', which gsm8k does not judge (it has exact_match (strict-match)",
        ),
        ("[benchmarks.task.gsm8k]\nhigher_is_better = 1\n", "higher_is_better must be true or false"),
    ],
)
def test_bad_benchmark_specs_are_refused(tmp_path: Path, capsys, spec: str, fragment: str) -> None:
    b = _run(tmp_path / "b")
    (tmp_path / "spec.toml").write_text(spec)
    err = _refused(["--base", str(b), "--tuned", str(b), "--spec", str(tmp_path / "spec.toml")], capsys)
    assert fragment in err


@pytest.mark.parametrize(
    "name,content,fragment",
    [
        ("r.csv", "id,exact_match\nq1,abc\n", "line 2: no metric column (a column of numbers)"),
        ("r.csv", "id,exact_match\nq1,1\nq2,abc\n", "line 3: exact_match = 'abc' is not a number"),
        ("r.csv", "id,exact_match\nq1,1\nq2,\n", "line 3: exact_match is missing"),
        ("r.csv", "id,exact_match,exact_match\nq1,1,1\n", "the header names 'exact_match' twice"),
        ("r.csv", "id,exact_match\nq1,nan\n", "exact_match is nan"),
        ("r.csv", "id,exact_match\nq1,1\nq1,0\n", "id 'q1' appears twice"),
        ("r.csv", "id,exact_match\nq1,1,5\n", "line 2: 2 columns expected"),
        ("r.csv", "name,exact_match\nq1,1\n", "no header with an id column"),
        (
            "r.jsonl",
            '{"id": "q1", "acc": 1}\n{"id": "q2", "acc": [1]}\n',
            "line 2: acc = [1] is not a number",
        ),
        ("r.jsonl", '{"id": "q1", "acc": 1}\n{"id": "q2", "acc": null}\n', "line 2: acc is missing"),
        ("r.jsonl", '{"id": "q1"}\n', "no metric column"),
    ],
)
def test_bad_per_example_files_are_refused(
    tmp_path: Path, capsys, name: str, content: str, fragment: str
) -> None:
    p = tmp_path / name
    p.write_text(content)
    assert fragment in _refused(["--base", str(p), "--tuned", str(p)], capsys)


def test_nothing_is_written_when_the_input_is_refused(tmp_path: Path, capsys) -> None:
    b = _run(tmp_path / "b")
    t = gen.write_run(
        tmp_path / "t", [gen.Task("gsm8k", 30, "generate")], MODEL, 2, "2026-11-01T10-00-00.000000"
    )
    out = tmp_path / "report.json"
    _refused(["--base", str(b), "--tuned", str(t), "--out", str(out)], capsys)
    assert not out.exists()


def test_a_folder_given_at_the_model_level_or_above_reads_the_same(tmp_path: Path) -> None:
    b = _run(tmp_path / "b")
    above, model = read_run(b, "base", "b"), read_run(next(b.iterdir()), "base", "b")
    assert above.scores == model.scores and above.aggregates == model.aggregates
    results = next(b.glob("*/results_*.json"))
    assert read_run(results, "base", "b").scores == above.scores
    shutil.rmtree(b)
    with pytest.raises(TuneproofError, match="not found"):
        read_arm([b / "x.jsonl"], "base")


COPA = [DATA / "errorbars_copa_tiny_gpt2", DATA / "errorbars_copa_tiny_random_gpt2"]


def test_a_real_multiple_choice_pair_is_judged_by_exact_mcnemar_with_one_run_each() -> None:
    runs = [read_run(p, "base", p.name) for p in COPA]
    for run, acc in zip(runs, (0.6, 0.8), strict=True):
        docs = run.scores[("copa", "none", "acc")]
        assert (
            len(docs) == 20
            and sum(docs.values()) / 20 == pytest.approx(acc) == run.aggregates[("copa", "none", "acc")]
        )
        assert run.texts == {}  # loglikelihood rows hold no response text
    report = judge_arms(read_arm([COPA[0]], "base"), read_arm([COPA[1]], "tuned"))
    assert report.benchmarks is not None and report.metrics["diversity"].extra.get("skipped")
    (line,) = report.benchmarks.lines
    assert line.test == "exact McNemar" and line.result.delta == pytest.approx(20.0)
    # 2 documents only the base got right, 6 only the tuned model: exact McNemar p = 0.289
    assert line.extra["mcnemar_p"] == pytest.approx(0.2890625)
    assert line.result.verdict == "INCONCLUSIVE" and report.benchmarks.notes == []
    assert line.power is None or "no effect size" in line.power  # no floor and no margin: nothing to size


def test_a_lone_multiple_choice_samples_file_reads_acc_and_acc_norm() -> None:
    samples = next((DATA / "errorbars_arc_easy_dummy").glob("samples_*.jsonl"))
    run = read_run(samples, "base", "arc")
    assert set(run.scores) == {("arc_easy", "none", "acc"), ("arc_easy", "none", "acc_norm")}
    assert run.aggregates == {} and run.results_file is None
    report = judge_arms(read_arm([samples], "base"), read_arm([samples], "tuned"))
    assert [x.result.delta for x in report.benchmarks.lines] == [0.0, 0.0]


def test_out_never_overwrites_a_file_read_from_inside_an_input_folder(tmp_path: Path, capsys) -> None:
    b = _run(tmp_path / "b")
    for target in (next(b.glob("*/results_*.json")), _samples(b)):
        before = target.read_bytes()
        err = _refused(["--base", str(b), "--tuned", str(b), "--out", str(target)], capsys)
        assert "is also an input of this command" in err and target.read_bytes() == before
    results = next(b.glob("*/results_*.json"))  # the results file given, its samples file beside it as --out
    err = _refused(["--base", str(results), "--tuned", str(results), "--out", str(_samples(b))], capsys)
    assert "is also an input" in err


def test_a_run_given_twice_or_copied_is_refused(tmp_path: Path, capsys) -> None:
    b, t = _run(tmp_path / "b"), _run(tmp_path / "t", seed=2, date="2026-11-02T10-00-00.000000")
    model_folder = next(b.iterdir())
    err = _refused(["--base", str(b), "--base", str(model_folder), "--tuned", str(t)], capsys)
    assert "of the base arm both read" in err
    shutil.copytree(b, tmp_path / "copy")
    err = _refused(["--base", str(b), "--base", str(tmp_path / "copy"), "--tuned", str(t)], capsys)
    assert "are the same lm-eval run (date 2026-11-01T10-00-00.000000)" in err


@pytest.mark.parametrize("value", ['"yes"', '"1.0"', "null", None])
def test_a_metric_that_is_not_a_number_is_refused_with_its_line(tmp_path: Path, capsys, value) -> None:
    b = _run(tmp_path / "b")
    p = _samples(b)
    lines = p.read_text().splitlines()
    row = json.loads(lines[2])
    if value is None:
        del row["exact_match"]
    else:
        row["exact_match"] = json.loads(value)
    lines[2] = json.dumps(row)
    p.write_text("\n".join(lines) + "\n")
    err = _refused(["--base", str(b), "--tuned", str(b)], capsys)
    assert (
        "line 3: exact_match of doc 2 is " + ("missing" if value is None else f"{json.loads(value)!r}") in err
    )


def test_an_empty_samples_file_is_named(tmp_path: Path, capsys) -> None:
    b = _run(tmp_path / "b")
    _samples(b).write_text("")
    assert "the samples of gsm8k in" in _refused(["--base", str(b), "--tuned", str(b)], capsys)


@pytest.mark.parametrize(
    "spec,fragment",
    [
        (
            '[benchmarks.task.gsm8k]\nfliter = "flexible-extract"\n',
            "[benchmarks.task.gsm8k] has unknown key(s) fliter",
        ),
        ("[benchmarks]\nmargin = 500_000\n", "margin 500000 for gsm8k is more than its metrics' whole range"),
        ("[benchmarks.task.gsm8k]\nmargin = 101\n", "margin 101 for gsm8k is more than"),
    ],
)
def test_spec_typos_and_absurd_margins_are_refused(tmp_path: Path, capsys, spec: str, fragment: str) -> None:
    b = _run(tmp_path / "b")
    (tmp_path / "spec.toml").write_text(spec)
    assert fragment in _refused(
        ["--base", str(b), "--tuned", str(b), "--spec", str(tmp_path / "spec.toml")], capsys
    )


def test_a_given_diversity_floor_beside_benchmark_runs_is_refused(tmp_path: Path, capsys) -> None:
    b = _run(tmp_path / "b")
    err = _refused(["--base", str(b), "--tuned", str(b), "--floor", "diversity=0.01"], capsys)
    assert "is for diversity, which is not measured beside benchmark runs" in err
    assert "names no metric" in _refused(["--base", str(b), "--tuned", str(b), "--floor", "gsm8k=5"], capsys)


def test_two_runs_against_one_use_the_paired_bootstrap_and_say_which_arm(tmp_path: Path) -> None:
    b1, b2 = _run(tmp_path / "b1"), _run(tmp_path / "b2", seed=2, date="2026-11-02T10-00-00.000000")
    t = _run(tmp_path / "t", seed=3, date="2026-11-03T10-00-00.000000")
    report = judge_arms(read_arm([b1, b2], "base"), read_arm([t], "tuned"))
    line = report.benchmarks.lines[0]
    assert line.test == "paired bootstrap" and "mcnemar_p" not in line.extra
    assert (
        "1 run in the tuned arm, so the run-to-run noise is not measured and the paired bootstrap decides"
        in line.result.reason
    )


def test_the_help_names_benchmark_runs(capsys) -> None:
    assert main(["gate", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "benchmark results" in out and "lm-eval output folder" in out and "per-example CSV/JSONL" in out


def _dated(folder: Path, seed: int) -> Path:
    return _run(folder, seed, date=f"2026-11-01T10-00-{seed:02d}.000000")


def _with_lengths(folder: Path, extra: int) -> Path:
    """Add lm-eval task-side metrics that are lower-is-better (len_response, parse_error, as the ETR tasks
    emit them) to every samples row and the results file, `extra` characters longer in this arm."""
    samples = _samples(folder)
    rows = [json.loads(x) for x in samples.read_text().splitlines()]
    for r in rows:
        r["metrics"] = [*r["metrics"], "len_response", "parse_error"]
        r["len_response"] = float(len(r["resps"][0][0]) + extra + r["doc_id"] % 7)
        r["parse_error"] = float(r["filtered_resps"][0] == "[invalid]")
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = next(folder.glob("*/results_*.json"))
    data = json.loads(results.read_text())
    for filt in ("strict-match", "flexible-extract"):
        for m in ("len_response", "parse_error"):
            values = [r[m] for r in rows if r["filter"] == filt]
            data["results"]["gsm8k"][f"{m},{filt}"] = sum(values) / len(values)
    data["higher_is_better"]["gsm8k"].update(len_response=False, parse_error=False)
    results.write_text(json.dumps(data))
    return folder


def _as_csv(folder: Path, out: Path) -> Path:
    rows = [json.loads(x) for x in _samples(folder).read_text().splitlines()]
    lines = ["id,task,filter,exact_match,len_response,parse_error"]
    lines += [
        f"{r['doc_id']},gsm8k,{r['filter']},{r['exact_match']},{r['len_response']},{r['parse_error']}"
        for r in rows
    ]
    out.write_text("\n".join(lines) + "\n")
    return out


def test_a_metric_reads_the_same_direction_in_every_input_form(tmp_path: Path) -> None:
    """The audit's case: given folders, len_response was lower-is-better (the results file says so); given
    the samples files alone it became higher-is-better, and the same data passed one way and failed the
    other. One table now, whatever the form; the spec still overrides it."""
    base = [_with_lengths(_dated(tmp_path / f"b{s}", s), 0) for s in (1, 2)]
    tuned = [_with_lengths(_dated(tmp_path / f"t{s}", s + 10), 40) for s in (1, 2)]
    forms = {
        "folders": (base, tuned),
        "samples files": ([_samples(f) for f in base], [_samples(f) for f in tuned]),
        "per-example CSV": (
            [_as_csv(f, tmp_path / f"b{i}.csv") for i, f in enumerate(base)],
            [_as_csv(f, tmp_path / f"t{i}.csv") for i, f in enumerate(tuned)],
        ),
        # fresh eyes: a folder and a CSV in one arm were refused as "arm files mixed with benchmark results"
        "a folder and a CSV in each arm": (
            [base[0], _as_csv(base[1], tmp_path / "mixed-b.csv")],
            [tuned[0], _as_csv(tuned[1], tmp_path / "mixed-t.csv")],
        ),
    }
    seen = {}
    for form, (b, t) in forms.items():
        report = judge_arms(read_arm(b, "base"), read_arm(t, "tuned"))
        assert report.benchmarks is not None
        line = next(
            x for x in report.benchmarks.lines if x.metric == "len_response" and x.filter == "strict-match"
        )
        seen[form] = (line.result.wanted, line.result.verdict)
    assert set(seen.values()) == {("down", "FAIL")}, seen  # 40 characters longer: worse, in every form
    from tuneproof.gate.spec import read_spec

    spec_file = tmp_path / "spec.toml"
    spec_file.write_text("[benchmarks.task.gsm8k]\nhigher_is_better = true\n")
    b, t = forms["samples files"]
    report = judge_arms(read_arm(b, "base"), read_arm(t, "tuned"), read_spec(spec_file))
    assert report.benchmarks is not None
    line = next(
        x for x in report.benchmarks.lines if x.metric == "len_response" and x.filter == "strict-match"
    )
    assert line.result.wanted == "up"  # the spec's word wins


def test_a_metric_at_zero_in_both_arms_is_no_difference(tmp_path: Path) -> None:
    base = [_with_lengths(_dated(tmp_path / f"b{s}", s), 0) for s in (1, 2)]
    tuned = [_with_lengths(_dated(tmp_path / f"t{s}", s + 10), 0) for s in (1, 2)]
    for folder in (*base, *tuned):  # no parse errors anywhere
        samples = _samples(folder)
        rows = [json.loads(x) for x in samples.read_text().splitlines()]
        samples.write_text("".join(json.dumps({**r, "parse_error": 0.0}) + "\n" for r in rows))
    report = judge_arms(
        read_arm([_samples(f) for f in base], "base"), read_arm([_samples(f) for f in tuned], "tuned")
    )
    assert report.benchmarks is not None
    line = next(
        x for x in report.benchmarks.lines if x.metric == "parse_error" and x.filter == "strict-match"
    )
    assert line.result.verdict == "PASS" and line.result.reason.startswith("no difference")
