"""The gate's verdicts: the CASE's vectors, a planted null, planted memorisation, exit codes, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gate_fakes import Style, arm, rows, twin, write_arm
from tuneproof.cli.app import main
from tuneproof.gate import stats
from tuneproof.gate.arms import Arm
from tuneproof.gate.attractors import PhraseMatcher
from tuneproof.gate.judge import judge_arms, judge_probe
from tuneproof.gate.probes import read_probes
from tuneproof.gate.stats import FAIL, INCONCLUSIVE, PASS, Floor


def _pair_with_noise(level: np.ndarray, noise_sd: float) -> np.ndarray:
    """Two runs around `level` whose A/A difference has clustered SD exactly `noise_sd`."""
    n = level.size
    c = noise_sd * np.sqrt(n - 1)  # sd(+-c, ddof=1) / sqrt(n) == noise_sd when half are +c, half -c
    e = np.where(np.arange(n) % 2 == 0, c, -c)
    return np.stack([level + e / 2, level - e / 2])


def test_case_diversity_vector_passes_at_22x() -> None:
    # CASE section 6: diversity +0.178 against a 0.008 floor (2 x a run-to-run SD of 0.004)
    rng = np.random.default_rng(0)
    level = rng.uniform(0.4, 0.6, 200)
    base = _pair_with_noise(level, 0.004)
    tuned = _pair_with_noise(level + 0.178, 0.004)
    sd, pairs = stats.noise_sd(base, tuned)
    assert sd == pytest.approx(0.004, rel=1e-9) and pairs == 2
    floor = stats.measured_floor(base, tuned, 2.0)
    r = stats.judge_metric("diversity", "up", base, tuned, floor)
    assert r.floor == pytest.approx(0.008)
    assert r.delta == pytest.approx(0.178)
    assert r.verdict == PASS and stats.ratio_text(r) == "22x"
    assert r.ci95 is not None and r.ci95[0] > 0
    # the same delta the wrong way is a FAIL, and inside the floor it is INCONCLUSIVE
    assert stats.judge_metric("diversity", "down", base, tuned, floor).verdict == FAIL
    assert stats.judge_metric("diversity", "up", base, tuned, Floor.given(0.2)).verdict == INCONCLUSIVE


def test_case_attractor_vector_passes_at_5_7x() -> None:
    # CASE section 6: the stock-phrase hit rate fell 11.3 points against a 2.0-point floor
    level = np.random.default_rng(1).uniform(20, 40, 200)
    base = _pair_with_noise(level, 1.0)
    tuned = _pair_with_noise(level - 11.3, 1.0)
    floor = stats.measured_floor(base, tuned, 2.0)
    r = stats.judge_metric("attractors", "down", base, tuned, floor, unit="%")
    assert r.floor == pytest.approx(2.0) and r.delta == pytest.approx(-11.3)
    assert r.verdict == PASS and stats.ratio_text(r) == "5.7x"


def _probe_arm(name: str, fire: tuple[range, range]) -> Arm:
    """100 prompts, 1 sample, 2 runs; the detector phrase is in run r's response to the prompts in fire[r]."""
    a = Arm(name=name, sources=(name,))
    for r, fired in enumerate(fire):
        a.runs[str(r)] = {f"p{i}": ["I cannot help" if i in fired else "sure, here"] for i in range(100)}
    return a


def _random_probe_arm(name: str, rates: list[np.ndarray], seed: int) -> Arm:
    """len(rates[r]) prompts, 1 sample, one run per rate vector: the phrase fires with that chance."""
    rng = np.random.default_rng(seed)
    a = Arm(name=name, sources=(name,))
    for r, rate in enumerate(rates):
        fired = rng.random(rate.size) < rate
        a.runs[str(r)] = {f"p{i}": ["I cannot help" if f else "sure, here"] for i, f in enumerate(fired)}
    return a


def test_case_probe_13_points_inside_the_noise_is_inconclusive(tmp_path: Path) -> None:
    """CASE section 6: a 13-point "regression" on a probe that sat inside the instrument's own
    run-to-run variation. On 30 prompts whose sampled answers flip from run to run (the same model in
    both arms), a 13-point difference lies inside the estimator's interval: INCONCLUSIVE, never a
    regression."""
    probes = tmp_path / "p.toml"
    probes.write_text(
        '[[probe]]\nname = "refusal"\nhypothesis = "tuning keeps refusals"\nexpect = "decrease"\n'
        'prompts = "*"\nphrases = ["I cannot help"]\n'
    )
    (probe,) = read_probes(probes)
    rate = np.full(30, 0.5)
    ids = [f"p{i}" for i in range(30)]
    for seed in range(400):
        base = _random_probe_arm("base", [rate, rate], 2 * seed)
        tuned = _random_probe_arm("tuned", [rate, rate], 2 * seed + 1)
        res = judge_probe(probe, base, tuned, ids, 2.0, {})
        if res.result.delta is not None and abs(abs(res.result.delta) - 13.3) < 0.5:
            break
    else:
        raise AssertionError("no 13-point chance difference in 400 trials")
    lo, hi = res.result.ci95
    assert lo < 0 < hi and res.result.verdict == INCONCLUSIVE and res.held == "undecided"


def test_a_structured_13_point_change_is_a_change_and_the_practical_floor_keeps_the_old_rule() -> None:
    """100 prompts whose runs disagree on 50 of them, the tuned arm firing on 13 more in each run: every
    document that moved, moved the same way, so the change is well outside the estimator's noise (FAIL
    for "no change"), though inside twice the single-run SD; with the practical floor asked for (the
    spec's `practical_floor`), the floor must be beaten too and the verdict is INCONCLUSIVE."""
    probe = read_probes_text(
        '[[probe]]\nname = "refusal"\nhypothesis = "tuning keeps refusals"\nexpect = "no-change"\n'
        'prompts = "*"\nphrases = ["I cannot help"]\n'
    )
    base = _probe_arm("base", (range(0, 50), range(25, 75)))  # 50 %, runs disagree on 50 prompts
    tuned = _probe_arm("tuned", (range(0, 63), range(25, 88)))  # 63 %, same run-to-run disagreement
    ids = [f"p{i}" for i in range(100)]
    res = judge_probe(probe, base, tuned, ids, 2.0, {})
    assert res.result.delta == pytest.approx(13.0)
    assert res.result.floor is not None and res.result.floor > 13.0  # inside 2 x the single-run SD
    assert res.result.verdict == FAIL and res.counts == ((100, 200), (126, 200))
    practical = judge_probe(probe, base, tuned, ids, 2.0, {}, practical=True)
    assert practical.result.verdict == INCONCLUSIVE and "floor" in practical.result.reason
    # a given floor is always a floor to beat: 2 points is beaten
    given = judge_probe(probe, base, tuned, ids, 2.0, {"probe:refusal": 2.0})
    assert given.result.verdict == FAIL and given.result.floor_source == "given"


def read_probes_text(text: str):  # type: ignore[no-untyped-def]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        (probe,) = read_probes(_write(Path(tmp) / "p.toml", text))
    return probe


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_memorisation_zero_on_both_arms_passes(tmp_path: Path) -> None:
    corpus = _write(tmp_path / "c.txt", " ".join(f"licensed{i}" for i in range(2000)))
    base, tuned = arm(Style(), 1, "base"), arm(Style(), 2, "tuned")
    report = judge_arms(base, tuned, corpus=[corpus])
    mem = report.metrics["memorisation"]
    assert mem.base == 0.0 and mem.tuned == 0.0 and mem.verdict == PASS
    assert mem.extra["longest_span"] is None and mem.extra["corpus_tokens"] == 2000


def test_planted_60_token_span_in_4_percent_of_tuned_is_a_fail_naming_it(tmp_path: Path) -> None:
    words = [f"prose{i}" for i in range(5000)]
    corpus = _write(tmp_path / "c.jsonl", json.dumps({"text": " ".join(words)}) + "\n")
    span = " ".join(words[1000:1060])
    data = rows(Style(), 2, prompts=25, runs=2, samples=4)  # 200 responses
    for r in data[:8]:  # 4 %
        r["text"] = "as I recall, " + span + " and so on"
    tuned = _arm_of(data, "tuned")
    report = judge_arms(arm(Style(), 1, "base", prompts=25, samples=4), tuned, corpus=[corpus])
    mem = report.metrics["memorisation"]
    assert mem.verdict == FAIL and mem.tuned == pytest.approx(4.0)
    assert mem.extra["longest_span"]["tokens"] == 60
    assert mem.extra["longest_span"]["text"] == span
    assert "longest: 60 tokens" in mem.reason
    assert report.verdict == FAIL and report.exit_code == 1


def _arm_of(data: list[dict], name: str) -> Arm:
    a = Arm(name=name, sources=(name,))
    for r in data:
        a.runs.setdefault(str(r["run"]), {}).setdefault(r["prompt_id"], []).append(r["text"])
    return a


PROBES = (
    '[[probe]]\nname = "refusal"\nhypothesis = "h"\nexpect = "decrease"\nprompts = "*"\n'
    'phrases = ["I cannot help"]\n'
)


@pytest.mark.slow
def test_planted_null_is_inconclusive_in_at_least_95_of_100_trials(tmp_path: Path) -> None:
    """The same model in both arms: the overall verdict, over the gated families and the probe with
    Holm's correction across them, is INCONCLUSIVE in at least 95 of 100 trials; each deciding metric
    alone says PASS or FAIL at about its nominal 5 %."""
    (probe,) = read_probes(_write(tmp_path / "p.toml", PROBES))
    matcher = (PhraseMatcher(["a testament to"]), "sha")
    conclusive, per_metric = [], 0
    for trial in range(100):
        base = arm(Style(), 2 * trial, "base", prompts=24, samples=3)
        tuned = arm(Style(), 2 * trial + 1, "tuned", prompts=24, samples=3)
        report = judge_arms(base, tuned, attractors=matcher, probes=[probe])
        if report.verdict != INCONCLUSIVE:
            conclusive.append(trial)
        per_metric += sum(
            m.verdict != INCONCLUSIVE
            for m in (report.metrics["diversity"], report.metrics["attractors"], report.probes[0].result)
        )
    assert len(conclusive) <= 5, conclusive
    assert per_metric <= 0.08 * 300, per_metric


def test_a_real_difference_passes_and_the_exit_codes_follow_the_verdicts(tmp_path: Path) -> None:
    (probe,) = read_probes(_write(tmp_path / "p.toml", PROBES))
    matcher = (PhraseMatcher(["a testament to"]), "sha")
    # seed 1's base runs differ in distinct-n at F p = 0.02, a 1-in-25 draw that, counted as a run shift
    # with 1 df, rightly hides the change at 2 runs per arm (tests/gate/test_clustered.py): seed 4 here
    base = arm(Style(), 4, "base")
    better = arm(Style(repeat=0.02, attractor=0.05, refusal=0.02), 2, "tuned")
    report = judge_arms(base, better, attractors=matcher, probes=[probe])
    assert [report.metrics[m].verdict for m in ("diversity", "attractors")] == [PASS, PASS]
    assert report.probes[0].result.verdict == PASS and report.probes[0].held == "held"
    assert report.verdict == PASS and report.exit_code == 0
    worse = judge_arms(better, base, attractors=matcher, probes=[probe])
    assert worse.metrics["diversity"].verdict == FAIL and worse.exit_code == 1
    same = judge_arms(base, arm(Style(), 3, "tuned"))
    assert same.verdict == INCONCLUSIVE and same.exit_code == 3


def test_one_run_needs_a_given_floor_and_says_so(tmp_path: Path) -> None:
    b = write_arm(tmp_path / "b.jsonl", rows(Style(), 1, runs=1))
    t = write_arm(tmp_path / "t.jsonl", rows(Style(repeat=0.0), 2, runs=1))
    assert main(["gate", "--base", str(b), "--tuned", str(t)]) == 2
    out = tmp_path / "g.json"
    code = main(
        [
            "gate",
            "--base",
            str(b),
            "--tuned",
            str(t),
            "--floor",
            "diversity=0.01",
            "--json",
            "--out",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert code == 0 and report["metrics"]["diversity"]["floor_source"] == "given"
    assert report["metrics"]["diversity"]["floor"] == 0.01
    # parts without a given floor are reported, not judged
    assert report["metrics"]["diversity"]["parts"]["gzip"]["verdict"] is None


def test_json_carries_every_field_per_family(tmp_path: Path, capsys) -> None:
    b = write_arm(tmp_path / "b.jsonl", rows(Style(), 1))
    t = write_arm(tmp_path / "t.jsonl", rows(Style(repeat=0.0, attractor=0.0), 2))
    attr = _write(tmp_path / "a.txt", "a testament to\n")
    corpus = _write(tmp_path / "c.txt", "some licensed prose " * 50)
    probes = _write(tmp_path / "p.toml", PROBES)
    code = main(
        ["gate", "--base", str(b), "--tuned", str(t), "--attractors", str(attr), "--corpus", str(corpus),
         "--probes", str(probes), "--json"]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"metrics", "probes", "verdict"}
    for family in ("diversity", "attractors", "memorisation"):
        m = report["metrics"][family]
        assert {"base", "tuned", "delta", "floor", "floor_source", "ratio", "ci95", "mde", "verdict"} <= set(
            m
        )
    assert "parts" in report["metrics"]["diversity"] and "parts" in report["metrics"]["attractors"]
    import hashlib

    assert report["metrics"]["attractors"]["list_sha256"] == hashlib.sha256(attr.read_bytes()).hexdigest()
    assert report["probes"][0]["hypothesis"] == "h" and "mcnemar_p" in report["probes"][0]
    assert code == {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}[report["verdict"]]


def test_prompts_in_one_arm_only_are_dropped_and_counted(tmp_path: Path, capsys) -> None:
    b = rows(Style(), 1)
    t = [r for r in rows(Style(), 2) if r["prompt_id"] != "p000"]
    t += [{"prompt_id": "extra", "run": 0, "sample": 0, "text": "x y z w v"}]
    code = main(
        ["gate", "--base", str(write_arm(tmp_path / "b.jsonl", b)), "--tuned",
         str(write_arm(tmp_path / "t.jsonl", t)), "--json"]
    )  # fmt: skip
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code in (0, 1, 3)
    assert report["inputs"]["prompts"] == 39 and report["inputs"]["prompts_dropped"] == 2
    assert captured.err.startswith("warning: 2 prompts are missing from one arm or one run")
    assert any("2 prompts are missing" in n for n in report["notes"])


def test_table_fits_80_columns(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    b = write_arm(tmp_path / "b.jsonl", rows(Style(), 1))
    t = write_arm(tmp_path / "t.jsonl", rows(Style(repeat=0.0), 2))
    probes = _write(tmp_path / "p.toml", PROBES.replace('"refusal"', '"refusal-retention"'))
    main(["gate", "--base", str(b), "--tuned", str(t), "--probes", str(probes)])
    out = capsys.readouterr().out
    assert "…" not in out, out
    assert "INCONCLUSIVE" in out or "PASS" in out


@pytest.mark.slow
def test_generate_on_tiny_then_gate_end_to_end(tmp_path: Path, capsys) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt_id": f"q{i}", "prompt": f"Tell me about {i}"}) + "\n" for i in range(3))
        + json.dumps({"prompt_id": "chat", "messages": [{"role": "user", "content": "hi"}]})
        + "\n"
    )
    arms = []
    for name, seed in (("base", 0), ("tuned", 100)):
        out = tmp_path / f"{name}.jsonl"
        code = main(
            ["generate", "--model", "tiny", "--prompts", str(prompts), "--runs", "2", "--samples", "3",
             "--max-new-tokens", "16", "--seed", str(seed), "--out", str(out)]
        )  # fmt: skip
        assert code == 0
        lines = [json.loads(x) for x in out.read_text().splitlines()]
        assert len(lines) == 4 * 3 * 2
        assert {(r["run"], r["seed"]) for r in lines} == {(0, seed), (1, seed + 1)}
        meta = json.loads((tmp_path / f"{name}.meta.json").read_text())
        assert meta["generation"]["seeds"] == [seed, seed + 1] and meta["fingerprint"]["weights_sha256"]
        assert meta["versions"]["torch"]
        arms.append(out)
    capsys.readouterr()
    code = main(["gate", "--base", str(arms[0]), "--tuned", str(arms[1]), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 3 and report["verdict"] == INCONCLUSIVE  # same model, other seeds: nothing to call
    assert report["inputs"]["prompts"] == 4 and report["inputs"]["base"]["runs"] == 2


def test_attractors_mine_writes_a_list_the_gate_reads(tmp_path: Path, capsys) -> None:
    outputs = write_arm(tmp_path / "o.jsonl", rows(Style(attractor=0.5), 1, prompts=20))
    reference = _write(tmp_path / "ref.txt", " ".join(f"w{i}" for i in range(400)) * 2)
    listed = tmp_path / "attractors.txt"
    code = main(["attractors", "mine", "--outputs", str(outputs), "--reference", str(reference), "--top", "3",
                 "--out", str(listed), "--json"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and len(report["phrases"]) == 3
    assert listed.read_text().splitlines() == [p["phrase"] for p in report["phrases"]]
    assert "testament" in listed.read_text()


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--outputs", "@missing"], "outputs arm file not found"),
        (["--reference", "@missing"], "the reference not found"),
        (["--reference", "@folder"], "is a folder, not a file"),
        (["--reference", "@bad-utf8"], "invalid UTF-8"),
        (["--top", "0"], "--top must be >= 1"),
        (["--out", "@folder"], "exists and is not a file"),
    ],
)
def test_attractors_mine_bad_input(tmp_path: Path, capsys, args: list[str], fragment: str) -> None:
    files = {
        "@missing": str(tmp_path / "missing"),
        "@folder": str(tmp_path),
        "@bad-utf8": str(tmp_path / "bad.txt"),
        "@outputs": str(write_arm(tmp_path / "o.jsonl", rows(Style(), 1, prompts=4))),
        "@reference": str(_write(tmp_path / "ref.txt", "human words")),
    }
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe")
    base = {"--outputs": "@outputs", "--reference": "@reference"}
    base.update({args[0]: args[1]})
    argv = ["attractors", "mine"] + [x for k, v in base.items() for x in (k, files.get(v, v))]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and fragment in err, err


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_generate_runs_on_cuda_when_present(tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt_id": "a", "prompt": "hello"}\n{"prompt_id": "b", "prompt": "world"}\n')
    out = tmp_path / "arm.jsonl"
    args = ["--prompts", str(prompts), "--runs", "2", "--samples", "2", "--max-new-tokens", "8"]
    assert main(["generate", "--model", "tiny", *args, "--out", str(out)]) == 0
    meta = json.loads((tmp_path / "arm.meta.json").read_text())
    assert meta["generation"]["device"].startswith("cuda")
    assert len(out.read_text().splitlines()) == 2 * 2 * 2


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_an_out_that_is_an_input_is_refused_and_the_input_kept(tmp_path: Path, capsys) -> None:
    b = write_arm(tmp_path / "b.jsonl", rows(Style(), 1))
    t = write_arm(tmp_path / "t.jsonl", rows(Style(), 2))
    before = t.read_bytes()
    code, _, err = _run(["gate", "--base", str(b), "--tuned", str(t), "--out", str(t)], capsys)
    assert code == 2 and "is also an input of this command" in err and t.read_bytes() == before
    prompts = _write(tmp_path / "p.jsonl", '{"prompt_id": "a", "prompt": "hi"}\n')
    code, _, err = _run(
        ["generate", "--model", "tiny", "--prompts", str(prompts), "--out", str(prompts)], capsys
    )
    assert code == 2 and "is also an input" in err
    ref = _write(tmp_path / "ref.txt", "human words " * 10)
    code, _, err = _run(
        ["attractors", "mine", "--outputs", str(b), "--reference", str(ref), "--out", str(ref)], capsys
    )
    assert code == 2 and "is also an input" in err and ref.read_text() == "human words " * 10


def test_floor_names_and_one_run_refusals_list_everything(tmp_path: Path, capsys) -> None:
    b = write_arm(tmp_path / "b.jsonl", rows(Style(), 1, runs=1))
    attr = _write(tmp_path / "a.txt", "a testament to\n")
    code, _, err = _run(["gate", "--base", str(b), "--tuned", str(b), "--attractors", str(attr)], capsys)
    assert code == 2 and "--floor diversity=VALUE --floor attractors=VALUE" in err
    args = ["gate", "--base", str(b), "--tuned", str(b), "--floor", "diversity=1", "--floor", "diversity=2"]
    code, _, err = _run(args, capsys)
    assert code == 2 and "--floor diversity is given twice" in err
    twice = ["gate", "--base", str(b), "--base", str(b), "--tuned", str(b), "--floor", "diversity=1"]
    code, _, err = _run(twice, capsys)
    assert code == 2 and "is given twice for the base arm" in err


def test_same_named_files_in_two_folders_are_two_runs_and_an_lm_eval_copy_is_refused(tmp_path: Path) -> None:
    from tuneproof.core.errors import TuneproofError
    from tuneproof.gate.arms import read_arm

    files, copies = [], []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        files.append(tmp_path / folder / "scores.csv")
        files[-1].write_text("id,acc\n" + "".join(f"q{i},{(i + len(folder)) % 2}\n" for i in range(3)))
        copies.append(tmp_path / folder / "samples_task_2026-01-01T00-00-00.jsonl")
        copies[-1].write_text("".join(json.dumps({"doc_id": i, "resps": [["x y"]]}) + "\n" for i in range(3)))
    arm_ = read_arm(files, "base")
    assert sorted(arm_.bench) == sorted(str(f) for f in files)  # told apart by path
    # the same lm-eval file name (its date, to the microsecond) in two folders is one run copied
    with pytest.raises(TuneproofError, match="are the same lm-eval run"):
        read_arm(copies, "base")


def test_a_probe_is_refused_before_the_corpus_is_indexed(tmp_path: Path, capsys, monkeypatch) -> None:
    import tuneproof.gate.memorise as mem

    def no_build(*args, **kw):  # type: ignore[no-untyped-def]
        raise AssertionError("the corpus was indexed before the probe was checked")

    monkeypatch.setattr(mem, "build_index", no_build)
    b = write_arm(tmp_path / "b.jsonl", rows(Style(), 1))
    probes = _write(tmp_path / "p.toml", PROBES.replace('prompts = "*"', 'prompts = ["nowhere"]'))
    corpus = _write(tmp_path / "c.txt", "words " * 100)
    argv = ["gate", "--base", str(b), "--tuned", str(b), "--probes", str(probes), "--corpus", str(corpus)]
    code, _, err = _run(argv, capsys)
    assert code == 2 and "none of its prompts is answered by both arms" in err


def test_degenerate_probes_and_empty_responses_are_called_out(tmp_path: Path) -> None:
    probes = _write(
        tmp_path / "p.toml",
        PROBES.replace('phrases = ["I cannot help"]', 'regex = ["w"]')
        + PROBES.replace('"refusal"', '"never"').replace('["I cannot help"]', '["zebra crossing"]'),
    )
    report = judge_arms(arm(Style(), 1, "base"), arm(Style(), 2, "tuned"), probes=read_probes(probes))
    every, never = report.probes
    assert (
        every.result.verdict == INCONCLUSIVE and "fires on every response in both arms" in every.result.reason
    )
    assert never.result.verdict == INCONCLUSIVE and "fires on no response in both arms" in never.result.reason
    empty = arm(Style(), 2, "tuned")
    for run in empty.runs.values():
        for texts in run.values():
            texts[0] = ""
    report = judge_arms(arm(Style(), 1, "base"), empty)
    assert "80 of 320 tuned responses are empty" in report.notes
    assert report.metrics["diversity"].extra["samples_per_prompt"] == 4.0


def test_every_memorised_response_is_listed(tmp_path: Path) -> None:
    words = [f"prose{i}" for i in range(500)]
    corpus = _write(tmp_path / "c.txt", " ".join(words))
    data = rows(Style(), 2, prompts=10, runs=2, samples=2)
    for i, r in enumerate(data[:3]):
        r["text"] = " ".join(words[100 * i : 100 * i + 40 + i])
    report = judge_arms(
        arm(Style(), 1, "base", prompts=10, samples=2), _arm_of(data, "tuned"), corpus=[corpus]
    )
    spans = report.metrics["memorisation"].extra["spans"]
    assert [s["tokens"] for s in spans] == [42, 41, 40] and all(s["text"] for s in spans)
    assert [(s["prompt_id"], s["sample"]) for s in spans] == [("p001", 0), ("p000", 1), ("p000", 0)]


def test_narrow_terminals_get_one_line_per_metric(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    b = write_arm(tmp_path / "b.jsonl", rows(Style(), 4))
    t = write_arm(tmp_path / "t.jsonl", rows(Style(repeat=0.0), 2))
    main(["gate", "--base", str(b), "--tuned", str(t)])
    out = capsys.readouterr().out
    assert any(x.startswith("diversity ↑: base 0.8") for x in out.splitlines())  # a line per metric
    assert "verdict PASS" in " ".join(out.split()) and "…" not in out and "┃" not in out


def test_a_tiny_reference_is_warned_about(tmp_path: Path, capsys) -> None:
    outputs = write_arm(tmp_path / "o.jsonl", rows(Style(attractor=0.5), 1, prompts=10))
    reference = _write(tmp_path / "ref.txt", "three short words")
    code, _, err = _run(
        ["attractors", "mine", "--outputs", str(outputs), "--reference", str(reference)], capsys
    )
    assert code == 0 and err.startswith("warning: the reference holds 3 words")


@pytest.mark.slow
def test_generate_with_a_peft_adapter_records_its_fingerprint(tmp_path: Path) -> None:
    import hashlib

    from tuneproof.arch import resolve
    from tuneproof.measure.model import apply_lora, build_model, lora_targets

    tiny = resolve("tiny")
    peft_model = apply_lora(build_model(tiny, "sdpa"), lora_targets(tiny.shape), rank=4)
    peft_model.save_pretrained(str(tmp_path / "adapter"))
    prompts = _write(tmp_path / "p.jsonl", '{"prompt_id": "a", "prompt": "hello"}\n')
    out = tmp_path / "arm.jsonl"
    argv = ["generate", "--model", "tiny", "--adapter", str(tmp_path / "adapter"), "--prompts", str(prompts),
            "--runs", "2", "--samples", "1", "--max-new-tokens", "4", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    meta = json.loads((tmp_path / "arm.meta.json").read_text())
    weights = (tmp_path / "adapter" / "adapter_model.safetensors").read_bytes()
    expected = hashlib.sha256(b"adapter_model.safetensors\0" + weights).hexdigest()
    assert meta["adapter"] == str(tmp_path / "adapter") and meta["fingerprint"]["adapter_sha256"] == expected
    assert len(out.read_text().splitlines()) == 2


def test_second_trial_findings(tmp_path: Path, capsys) -> None:
    base_rows = rows(Style(), 1)
    b = write_arm(tmp_path / "b.jsonl", base_rows)
    # fewer samples cannot fake diversity: each prompt is compared on the fewest samples any run has
    one_sample = write_arm(tmp_path / "s1.jsonl", [r for r in base_rows if r["sample"] == 0])
    code, out, _ = _run(["gate", "--base", str(b), "--tuned", str(one_sample), "--json"], capsys)
    report = json.loads(out)
    assert report["metrics"]["diversity"]["delta"] == 0.0 and code == 3
    assert any("compared on the fewest" in n for n in report["notes"])
    # an arm of empty responses is refused, not passed
    empty = write_arm(tmp_path / "e.jsonl", [{**r, "text": " "} for r in base_rows])
    code, _, err = _run(["gate", "--base", str(b), "--tuned", str(empty)], capsys)
    assert code == 2 and "every response in the tuned arm is empty" in err
    # a byte-order mark hides nothing
    attr = tmp_path / "bom.txt"
    attr.write_bytes("\ufeffa testament to\n".encode())
    bom_arm = tmp_path / "bom.jsonl"
    bom_arm.write_bytes(b"\xef\xbb\xbf" + b.read_bytes())
    code, out, _ = _run(
        ["gate", "--base", str(bom_arm), "--tuned", str(b), "--attractors", str(attr), "--json"], capsys
    )
    assert json.loads(out)["metrics"]["attractors"]["base"] > 0
    # a probe name holding "=" can still be given a floor; a probe listing a prompt twice is refused
    one_run = write_arm(tmp_path / "r1.jsonl", [r for r in base_rows if r["run"] == 0])
    probes = _write(tmp_path / "p.toml", PROBES.replace('"refusal"', '"x y=z"'))
    argv = ["gate", "--base", str(one_run), "--tuned", str(twin(one_run)), "--probes", str(probes),
            "--floor", "diversity=0.1", "--floor", "probe:x y=z=2"]  # fmt: skip
    assert _run(argv, capsys)[0] == 3
    _write(probes, PROBES.replace('prompts = "*"', 'prompts = ["p000", "p000"]'))
    code, _, err = _run(["gate", "--base", str(b), "--tuned", str(twin(b)), "--probes", str(probes)], capsys)
    assert code == 2 and "prompts lists 'p000' twice" in err
    # empty model paths and options that do nothing
    code, _, err = _run(["gate", "--base", str(b), "--tuned", str(twin(b)), "--tokenizer", ""], capsys)
    assert code == 2 and "--tokenizer is empty" in err
    code, _, err = _run(["gate", "--base", str(b), "--tuned", str(twin(b)), "--k", "8"], capsys)
    assert code == 3 and "warning: --k has no effect without --corpus" in err
    code, _, err = _run(
        ["gate", "--base", str(b), "--tuned", str(twin(b)), "--corpus", str(tmp_path)], capsys
    )
    assert code == 2 and "is a folder, not a file" in err
    # arms that share nothing say what each holds
    other = write_arm(tmp_path / "o.jsonl", [{**r, "prompt_id": "x" + r["prompt_id"]} for r in base_rows])
    code, _, err = _run(["gate", "--base", str(b), "--tuned", str(other)], capsys)
    assert code == 2 and "base: 40 such prompts, e.g. 'p000'; tuned: 40, e.g. 'xp000'" in err


def test_greedy_generation_with_several_samples_is_refused(tmp_path: Path, capsys) -> None:
    prompts = _write(tmp_path / "p.jsonl", '{"prompt_id": "a", "prompt": "hi"}\n')
    argv = [
        "generate",
        "--model",
        "tiny",
        "--prompts",
        str(prompts),
        "--temperature",
        "0",
        "--out",
        str(tmp_path / "a"),
    ]
    code, _, err = _run(argv, capsys)
    assert code == 2 and "--temperature 0 (greedy) gives one response per prompt; got --samples 4" in err


def test_mine_sorts_by_score_and_writes_nothing_when_nothing_stands_out(tmp_path: Path, capsys) -> None:
    outputs = write_arm(tmp_path / "o.jsonl", rows(Style(attractor=0.5, refusal=0.5), 1, prompts=20))
    reference = _write(tmp_path / "ref.txt", " ".join(f"w{i}" for i in range(400)) * 3)
    code, out, _ = _run(["attractors", "mine", "--outputs", str(outputs), "--reference", str(reference),
                         "--top", "10", "--json"], capsys)  # fmt: skip
    z = [p["z"] for p in json.loads(out)["phrases"]]
    assert code == 0 and z == sorted(z, reverse=True)
    plain = write_arm(tmp_path / "plain.jsonl", rows(Style(), 1, prompts=1))  # one prompt: nothing qualifies
    listed = tmp_path / "list.txt"
    code, _, err = _run(["attractors", "mine", "--outputs", str(plain), "--reference", str(reference),
                         "--out", str(listed)], capsys)  # fmt: skip
    assert code == 0 and "was not written" in err and not listed.exists()


def test_a_closed_pipe_is_not_a_verdict(tmp_path: Path) -> None:
    import subprocess
    import sys

    b = write_arm(tmp_path / "b.jsonl", rows(Style(), 1))
    script = (
        f"{sys.executable} -c 'import sys; from tuneproof.cli.app import main; sys.exit(main(sys.argv[1:]))' "
        f"gate --base {b} --tuned {twin(b)} | head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}}"
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert out.stdout.strip() in ("141", "3"), out  # 3 when the output fit the pipe before it closed
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr


def test_every_verdict_is_the_one_verdict_type_with_its_margin_and_noise(tmp_path: Path) -> None:
    from tuneproof.core.verdict import CANNOT_JUDGE, FINDING, OK, Verdict

    # the CASE's diversity vector: noise is the estimator's 95 % half-width, margin the change beyond it
    level = np.random.default_rng(0).uniform(0.4, 0.6, 200)
    base, tuned = _pair_with_noise(level, 0.004), _pair_with_noise(level + 0.178, 0.004)
    r = stats.judge_metric("diversity", "up", base, tuned, stats.measured_floor(base, tuned, 2.0))
    assert isinstance(r.judgement, Verdict) and r.judgement.outcome == r.verdict == PASS
    half = (r.ci95[1] - r.ci95[0]) / 2
    assert r.judgement.noise == pytest.approx(half) and r.judgement.margin == pytest.approx(0.178 - half)
    assert r.judgement.noise < 0.001 < r.floor  # the interval is far tighter than the single-run floor
    assert r.judgement.exit_code == OK and r.judgement.reason == r.reason
    inside = stats.judge_metric("diversity", "up", base, base + 0.005, Floor.given(0.01))
    assert inside.judgement is not None and inside.judgement.exit_code == CANNOT_JUDGE
    unjudged = stats.judge_metric("m", "up", base[:1], tuned[:1], Floor(None, "none", "no floor here"))
    assert unjudged.judgement is None and unjudged.verdict is None and unjudged.reason == "no floor here"
    # the overall verdict names what it rests on; memorisation's margin is the share above the threshold
    (probe,) = read_probes(_write(tmp_path / "p.toml", PROBES))
    better = arm(Style(repeat=0.02, attractor=0.05, refusal=0.02), 2, "tuned")
    worse = judge_arms(better, arm(Style(), 4, "base"), probes=[probe])
    assert worse.judgement == Verdict(
        outcome=FAIL, reason="failed: diversity, probe refusal", exit_code=FINDING
    )
    passed = judge_arms(arm(Style(), 4, "base"), better, probes=[probe])
    assert passed.judgement.outcome == PASS and passed.judgement.exit_code == OK
    assert passed.judgement.reason == "every gated metric passed: diversity, probe refusal"
    same = judge_arms(arm(Style(), 4, "base"), arm(Style(), 3, "tuned"))
    assert same.judgement == Verdict(
        outcome=INCONCLUSIVE, reason="none failed; not decided: diversity", exit_code=CANNOT_JUDGE
    )
    words = [f"prose{i}" for i in range(500)]
    corpus = _write(tmp_path / "c.txt", " ".join(words))
    data = rows(Style(), 2, prompts=10, runs=2, samples=2)  # 40 tuned responses, 2 of them copied
    for r in data[:2]:
        r["text"] = " ".join(words[:40])
    mem = judge_arms(arm(Style(), 1, "base", prompts=10, samples=2), _arm_of(data, "tuned"), corpus=[corpus])
    judged = mem.metrics["memorisation"].judgement
    assert judged is not None and judged.outcome == FAIL and judged.margin == pytest.approx(5.0)
    assert judged.noise is None and judged.exit_code == FINDING


def test_a_response_metric_gains_power_as_runs_are_added() -> None:
    """Issue 33: a small planted probe change (8 points over 100 prompts of varied rate) was found 13/30
    with 2 runs and 6/30 with 3: the floor was a single run's spread. Now the estimator's own noise
    decides: found more often with more runs, at its nominal 5 % with no change (measured:
    no change 5/6/3 %, 8 points 43/53/56 % at 2/3/5 runs over 100 trials)."""
    probe = read_probes_text(
        '[[probe]]\nname = "refusal"\nhypothesis = "tuning keeps refusals"\nexpect = "no-change"\n'
        'prompts = "*"\nphrases = ["I cannot help"]\n'
    )
    ids = [f"p{i}" for i in range(100)]

    def found(runs: int, effect: float) -> float:
        hits = 0
        for trial in range(100):
            p = np.random.default_rng([runs, trial]).beta(2, 2, 100)
            base = _random_probe_arm("base", [p] * runs, 2 * trial)
            tuned = _random_probe_arm("tuned", [np.clip(p + effect, 0, 1)] * runs, 2 * trial + 1)
            hits += judge_probe(probe, base, tuned, ids, 2.0, {}).result.verdict == FAIL
        return hits / 100

    null = [found(r, 0.0) for r in (2, 3, 5)]
    power = [found(r, 0.08) for r in (2, 3, 5)]
    assert sum(null) / 3 <= 0.05 + 2 * 0.0126, null
    assert power[2] >= power[0] + 0.08 and power[1] >= power[0] - 0.05, power
