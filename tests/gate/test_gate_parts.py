"""The gate's instruments, each against a hand-computed answer: arms, diversity, attractors, the k-gram
index, probes and the statistics."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from gate_fakes import Style, arm
from tuneproof.core.errors import TuneproofError
from tuneproof.gate import stats
from tuneproof.gate.arms import Arm, pair, read_arm
from tuneproof.gate.attractors import PhraseMatcher, mine, read_phrases
from tuneproof.gate.diversity import distinct_n, diversity_scores, gzip_ratio, mean_cosine_distance, tokens
from tuneproof.gate.memorise import build_index, query, window_hashes
from tuneproof.gate.probes import mcnemar_exact, read_probes, wilson
from tuneproof.gate.spec import GateSpec, read_spec
from tuneproof.gate.stats import FAIL, INCONCLUSIVE, PASS, Floor
from tuneproof.gate.tokens import Tokens, word_values

# ---------------------------------------------------------------- arms


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_arm_rows_are_indexed_by_run_and_prompt_in_sample_order(tmp_path: Path) -> None:
    p = _jsonl(
        tmp_path / "a.jsonl",
        [
            {"prompt_id": "x", "run": 1, "sample": 1, "text": "second", "extra": 5},
            {"prompt_id": "x", "run": 1, "sample": 0, "text": "first"},
            {"prompt_id": "x", "run": "b", "sample": 0, "text": "other run"},
        ],
    )
    a = read_arm([p], "base")
    assert a.run_names == ["1", "b"] and a.texts("1", "x") == ["first", "second"]
    assert a.prompt_ids == ["x"] and a.num_responses == 3


def test_lm_eval_log_samples_are_one_run_per_file(tmp_path: Path) -> None:
    rows = [
        {"doc_id": i, "resps": [[f"r{i}a"], [f"r{i}b"]], "filtered_resps": [f"r{i}a", f"r{i}b"]}
        for i in range(3)
    ]
    f1 = _jsonl(tmp_path / "samples_gsm8k_2026-01-01T00-00-00.jsonl", rows)
    f2 = _jsonl(tmp_path / "samples_gsm8k_2026-01-02T00-00-00.jsonl", rows)
    a = read_arm([f1, f2], "base")
    assert len(a.run_names) == 2
    assert a.prompt_ids == ["gsm8k/0", "gsm8k/1", "gsm8k/2"]
    assert a.texts(a.run_names[0], "gsm8k/1") == ["r1a", "r1b"]


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"", "holds no responses"),
        (b'{"prompt_id": "x", "run": 0, "sample": 0}\n', "no 'text'"),
        (b'{"prompt_id": "x", "run": 0, "sample": 0, "text": 5}\n', "'text' must be a string"),
        (b'{"prompt_id": "x", "run": 0, "sample": -1, "text": "a"}\n', "'sample' must be an integer >= 0"),
        (b'{"prompt_id": "x", "run": 0, "sample": 0, "text": "\xff"}\n', "line 1: invalid UTF-8 at byte"),
        (b"[1, 2]\n", "not a JSON object"),
        (b"{oops\n", "not JSON"),
        (b'{"prompt_id": "x", "run": 0, "sample": 0, "text": "a"}\n' * 2, "has sample 0 twice"),
        (b'{"doc_id": 1, "resps": [[3]]}\n', "holds no scored documents"),
    ],
)
def test_bad_arm_rows_are_refused_with_the_line(tmp_path: Path, content: bytes, fragment: str) -> None:
    p = tmp_path / "a.jsonl"
    p.write_bytes(content)
    with pytest.raises(TuneproofError, match=None) as e:
        read_arm([p], "base")
    assert fragment in e.value.message


def test_corrupt_gzip_arm_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "a.jsonl.gz"
    row = b'{"prompt_id": "x", "run": 0, "sample": 0, "text": "a"}\n'
    p.write_bytes(gzip.compress(row + row.replace(b'0, "text', b'1, "text') * 50)[:40])
    with pytest.raises(TuneproofError, match="cannot read"):
        read_arm([p], "base")


def test_pair_keeps_prompts_answered_in_every_run_of_both_arms() -> None:
    b = Arm(
        name="base",
        sources=("b",),
        runs={"0": {"a": ["x"], "b": ["x"]}, "1": {"a": ["x"], "b": ["x"], "c": ["x"]}},
    )
    t = Arm(name="tuned", sources=("t",), runs={"0": {"a": ["x"], "d": ["x"]}, "1": {"a": ["x"]}})
    p = pair(b, t)
    assert p.prompt_ids == ["a"] and p.num_dropped == 3  # b (tuned lacks), c (one run), d (one run, one arm)
    with pytest.raises(TuneproofError, match="share no prompt"):
        pair(b, Arm(name="tuned", sources=("t",), runs={"0": {"z": ["x"]}}))


# ---------------------------------------------------------------- diversity


def test_distinct_n_and_gzip_by_hand() -> None:
    a, b = ["the", "cat", "sat", "on", "the", "mat"], ["the", "cat", "ran"]
    assert distinct_n([a], 1) == pytest.approx(5 / 6)
    assert distinct_n([a, b], 2) == pytest.approx(6 / 7)  # "the cat" twice; n-grams never span responses
    assert math.isnan(distinct_n([["x"]], 2))
    rep = [["same", "words", "again"]] * 20
    varied = [[f"w{i}", f"v{i}", f"u{i}"] for i in range(20)]
    assert gzip_ratio(rep) > 3 * gzip_ratio(varied)
    assert tokens("Hello, World!") == ["hello", ",", "world", "!"]


def test_mean_cosine_distance() -> None:
    v = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    assert mean_cosine_distance(v) == pytest.approx((1 + 0 + 1) / 3)
    assert math.isnan(mean_cosine_distance(v[:1]))


def test_length_cannot_fake_diversity() -> None:
    # the tuned arm says the same as the base, then adds fresh words: at matched length they are equal
    b = Arm(name="base", sources=("b",), runs={r: {"p": [f"a b c d {r}", f"a b c d {r}"]} for r in "01"})
    t = Arm(
        name="tuned",
        sources=("t",),
        runs={r: {"p": [f"a b c d {r} x1 x2 x3", f"a b c d {r} y1 y2 y3"]} for r in "01"},
    )
    d = diversity_scores(b, t, ["p"])
    base, tuned = d.scores["distinct-1"]
    assert np.array_equal(base, tuned) and d.matched_lengths.tolist() == [5]


def test_too_short_prompts_are_left_out_and_counted() -> None:
    b = Arm(name="base", sources=("b",), runs={"0": {"p": ["a b"], "q": ["a b c d e"]}})
    d = diversity_scores(b, b, ["p", "q"])
    assert d.num_short == 1 and np.isnan(d.scores["distinct"][0][0, 0])


def test_embedding_diversity_with_a_local_model2vec_model(tmp_path: Path) -> None:
    pytest.importorskip("model2vec")
    from model2vec import StaticModel
    from tokenizers import Tokenizer, models, pre_tokenizers

    from tuneproof.gate.diversity import load_embedder

    words = ["[UNK]", "[PAD]", "red", "blue", "green", "car", "boat"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    vectors = np.eye(len(words), dtype=np.float32)
    StaticModel(vectors, tok).save_pretrained(str(tmp_path / "m2v"))
    embed = load_embedder(str(tmp_path / "m2v"))
    same = embed(["red car", "red car"])
    other = embed(["red car", "blue boat"])
    assert mean_cosine_distance(same) == pytest.approx(0.0, abs=1e-6)
    assert mean_cosine_distance(other) == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(TuneproofError, match="embedder folder not found"):
        load_embedder(str(tmp_path / "nope"))


# ---------------------------------------------------------------- attractors


def test_phrase_matching_is_case_insensitive_and_word_bounded() -> None:
    m = PhraseMatcher(["a testament to", "delve", "of course", "of course not"])
    assert m.found("It was A  Testament\nto craft") == ["a testament to"]
    assert m.found("we delve; delved; delves") == ["delve"]
    assert m.found("Of course not. Of course!") == ["of course not", "of course"]
    assert m.count("of courses") == 0
    with pytest.raises(TuneproofError, match="empty"):
        PhraseMatcher(["  ", ""])


def test_a_long_list_is_one_pattern_and_finds_the_same_as_one_by_one() -> None:
    rng = np.random.default_rng(0)
    phrases = [" ".join(f"w{x}" for x in rng.integers(0, 300, size=rng.integers(1, 4))) for _ in range(3000)]
    text = " ".join(f"w{x}" for x in rng.integers(0, 300, size=2000))
    m = PhraseMatcher(phrases)
    import re

    hit_words = set()
    for match in m.pattern.finditer(text):
        hit_words.add(match.group(0))
    assert hit_words and all(
        re.search(r"(?<!\w)" + re.escape(h) + r"(?!\w)", text) for h in hit_words
    )  # every hit is real
    # every listed phrase present in the text is found when it stands alone
    some = [p for p in phrases if re.search(r"(?<!\w)" + re.escape(p) + r"(?!\w)", text)][:50]
    for p in some:
        assert m.count(f"x {p} y") >= 1, p


def test_read_phrases_hashes_the_file(tmp_path: Path) -> None:
    p = tmp_path / "list.txt"
    p.write_text("# stock phrases\na testament to\n\ndelve\n")
    phrases, sha = read_phrases(p)
    import hashlib

    assert phrases == ["a testament to", "delve"] and sha == hashlib.sha256(p.read_bytes()).hexdigest()
    (tmp_path / "empty.txt").write_text("# nothing\n\n")
    with pytest.raises(TuneproofError, match="is empty"):
        read_phrases(tmp_path / "empty.txt")


def test_mining_ranks_a_planted_stock_phrase_first() -> None:
    a = arm(Style(attractor=0.5), 1, "tuned", prompts=20)
    reference = " ".join(f"w{i}" for i in range(400)) * 3 + " the craft is a test"
    top = mine(a, reference, top=5)
    assert top[0].phrase in ("a testament to", "is a testament", "testament to the")
    assert top[0].num_prompts >= 2 and top[0].reference_count == 0
    # sub-phrases that only repeat the kept phrase are folded into it
    assert "a testament" not in [m.phrase for m in top]


def test_mining_needs_two_prompts() -> None:
    a = Arm(name="o", sources=("o",), runs={"0": {"p": ["zebra zebra zebra"], "q": ["other words here"]}})
    assert "zebra" not in [m.phrase for m in mine(a, "plain human words here", top=10)]


# ---------------------------------------------------------------- memorisation


def _naive_hash(values: list[int], k: int) -> list[int]:
    P, M = 0x9E3779B97F4A7C15, 1 << 64
    out = []
    for i in range(len(values) - k + 1):
        h = 0
        for v in values[i : i + k]:
            h = (h * P + v) % M
        out.append(h)
    return out


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 13, 32])
def test_window_hashes_equal_the_polynomial_by_hand(k: int) -> None:
    values = np.random.default_rng(k).integers(0, 2**63, size=70, dtype=np.uint64)
    assert window_hashes(values, k).tolist() == _naive_hash([int(v) for v in values], k)
    assert window_hashes(values[: k - 1], k).size == 0


def test_index_finds_spans_inside_documents_only(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TUNEPROOF_CACHE", str(tmp_path / "cache"))
    doc1 = " ".join(f"a{i}" for i in range(20))
    doc2 = " ".join(f"b{i}" for i in range(20))
    corpus = _jsonl(tmp_path / "c.jsonl", [{"text": doc1}, {"text": doc2}])
    index = build_index([corpus], k=4)
    assert index.num_tokens == 40 and index.hashes.size == 2 * 17
    texts = [
        "x a3 a4 a5 a6 a7 y",  # 5 corpus tokens: 2 windows -> span 5
        "a18 a19 b0 b1",  # crosses the document boundary: no hit
        "a1 a2 a3",  # shorter than k
        "",
    ]
    hit, longest = query(index, texts)
    assert hit.tolist() == [True, False, False, False] and longest.tolist() == [5, 0, 0, 0]
    # the second build of the same corpus and k is read from the cache
    again = build_index([corpus], k=4)
    assert again.cached.startswith("loaded from") and np.array_equal(again.hashes, index.hashes)
    assert build_index([corpus], k=5).cached.startswith("built")


def test_a_document_read_in_blocks_loses_no_window(tmp_path: Path, monkeypatch) -> None:
    import tuneproof.gate.memorise as mem

    words = [f"t{i}" for i in range(57)]
    corpus = tmp_path / "c.txt"
    corpus.write_text(" ".join(words))
    index = build_index([corpus], k=4, use_cache=False)
    assert index.hashes.size == 57 - 4 + 1
    _, longest = query(index, [" ".join(words)])
    assert longest.tolist() == [57]
    # the same text in lines, read in blocks of about 12 bytes: windows across the blocks are all there
    monkeypatch.setattr(mem, "_PIECE_BYTES", 12)
    corpus.write_text("\n".join(" ".join(words[i : i + 3]) for i in range(0, 57, 3)) + "\n")
    lines = build_index([corpus], k=4, use_cache=False)
    assert lines.num_tokens == 57 and np.array_equal(lines.hashes, index.hashes)


def test_word_values_hash_each_words_bytes() -> None:
    data = "Zoë  went\thome.\nzoë went home.".encode()
    values, starts, ends = word_values(data)
    words = [data[s:e] for s, e in zip(starts, ends, strict=True)]
    assert words == ["Zoë".encode(), b"went", b"home.", "zoë".encode(), b"went", b"home."]
    assert values[1] == values[4] and values[2] == values[5]  # same bytes, same value
    assert values[0] != values[3]  # case is kept
    assert word_values(b"  \n ")[0].size == 0
    values2, starts2 = Tokens().encode(["Zoë  went\thome.", "", "zoë went home."])
    assert values2.tolist() == values.tolist() and starts2.tolist() == [0, 3, 3]


def test_tokens_are_deterministic_across_processes() -> None:
    import subprocess
    import sys

    code = "from tuneproof.gate.tokens import Tokens; print(Tokens().encode(['verbatim words'])[0].tolist())"
    runs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout for _ in range(2)
    }
    assert len(runs) == 1 and Tokens().encode(["verbatim words"])[0].tolist() == json.loads(runs.pop())


@pytest.mark.parametrize(
    "content,fragment",
    [(b"", "holds no text"), (b"\xff\xfe", "invalid UTF-8"), (b'{"txt": 1}\n', "no string 'text' field")],
)
def test_bad_corpus_is_refused(tmp_path: Path, content: bytes, fragment: str) -> None:
    p = tmp_path / ("c.jsonl" if b"{" in content else "c.txt")
    p.write_bytes(content)
    with pytest.raises(TuneproofError) as e:
        build_index([p], use_cache=False)
    assert fragment in e.value.message


# ---------------------------------------------------------------- probes and statistics


def test_wilson_and_mcnemar_against_known_values() -> None:
    from scipy.stats import binomtest

    for k, n in ((29, 100), (0, 100), (100, 100), (3, 7)):  # CASE: 0/100 and 29/100
        ref = binomtest(k, n).proportion_ci(method="wilson")
        assert wilson(k, n) == pytest.approx((ref.low, ref.high), abs=1e-6)
    assert (round(wilson(29, 100)[0], 4), round(wilson(29, 100)[1], 4)) == (0.2101, 0.3854)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 * 0.5**6)
    assert mcnemar_exact(5, 5) == pytest.approx(1.0)


PROBE = '[[probe]]\nname = "p"\nhypothesis = "h"\nexpect = "increase"\nprompts = ["a"]\nregex = ["x+"]\n'


@pytest.mark.parametrize(
    "text,fragment",
    [
        (PROBE.replace('hypothesis = "h"\n', ""), "has no hypothesis"),
        (PROBE.replace('hypothesis = "h"', 'hypothesis = "  "'), "has no hypothesis"),
        (PROBE.replace("increase", "up"), "use increase, decrease or no-change"),
        (PROBE.replace('regex = ["x+"]', 'regex = ["(x"]'), "does not compile"),
        (PROBE.replace('regex = ["x+"]\n', ""), "has no detector"),
        (PROBE + PROBE, "two probes are named 'p'"),
        (PROBE.replace("prompts", "prompt"), "unknown key"),
        ("probe = 3\n", "holds no [[probe]] tables"),
        ("[[probe]\n", "not valid TOML"),
    ],
)
def test_bad_probes_are_refused(tmp_path: Path, text: str, fragment: str) -> None:
    p = tmp_path / "p.toml"
    p.write_text(text)
    with pytest.raises(TuneproofError) as e:
        read_probes(p)
    assert fragment in e.value.message


def test_noise_sd_pools_arms_and_pairs_clustered_by_prompt() -> None:
    base = np.array([[0.0, 1.0, 2.0, 3.0], [0.1, 0.9, 2.1, 2.9]])
    tuned = np.array([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.2, 1.0, 0.8]])
    sd, pairs = stats.noise_sd(base, tuned)
    d_b = base[0] - base[1]
    var = [
        np.var(d_b, ddof=1) / 4,
        0.0,
        np.var(tuned[0] - tuned[2], ddof=1) / 4,
        np.var(tuned[1] - tuned[2], ddof=1) / 4,
    ]
    assert pairs == 4 and sd == pytest.approx(math.sqrt(sum(var) / 4))
    assert stats.noise_sd(base[:1], tuned[:1]) == (None, 0)


def test_verdicts_for_each_direction() -> None:
    level = np.linspace(0, 1, 50)
    base = np.stack([level, level + 0.01 * (-1) ** np.arange(50)])
    up = base + 0.5
    f = Floor.given(0.1)
    assert stats.judge_metric("m", "up", base, up, f).verdict == PASS
    assert stats.judge_metric("m", "down", base, up, f).verdict == FAIL
    assert stats.judge_metric("m", "up", base, base + 0.05, f).verdict == INCONCLUSIVE
    assert stats.judge_metric("m", "no-change", base, base + 0.01, f).verdict == PASS
    assert stats.judge_metric("m", "no-change", base, up, f).verdict == FAIL
    # two runs per arm: the estimator's own interval decides, with or without a floor
    unfloored = stats.judge_metric("m", "up", base, up, Floor(None, "none", "no floor"))
    assert unfloored.verdict == PASS and unfloored.extra["test"] == "clustered t"
    # one run: nothing measures the run-to-run noise, so no verdict without a floor
    none = stats.judge_metric("m", "up", base[:1], up[:1], Floor(None, "none", "no floor"))
    assert none.verdict is None and none.mde is not None
    # a significant test result is needed as well when one is given
    assert stats.judge_metric("m", "up", base, up, f, test=("McNemar", 0.2)).verdict == INCONCLUSIVE


def test_the_mde_is_at_least_the_floor_and_shrinks_with_prompts() -> None:
    rng = np.random.default_rng(1)
    mdes = []
    for n in (20, 80, 320):
        base = rng.normal(0, 1, (2, n))
        tuned = base + rng.normal(0, 1, (2, n))
        r = stats.judge_metric("m", "up", base, tuned, Floor.given(0.01))
        mdes.append(r.mde)
    assert mdes[0] > mdes[1] > mdes[2] > 0.01
    assert mdes[0] / mdes[2] == pytest.approx(4, rel=0.35)  # ~ 1 / sqrt(n)


def test_spec_file_overrides_defaults(tmp_path: Path) -> None:
    p = tmp_path / "s.toml"
    p.write_text('floor_k = 3\n[diversity]\nmetric = "gzip"\n[memorisation]\nthreshold = 1.5\nk = 50\n')
    s = read_spec(p)
    assert (s.floor_k, s.diversity.metric, s.diversity.wanted, s.threshold, s.k) == (
        3, "gzip", None, 1.5, 50,
    )  # fmt: skip
    assert GateSpec().diversity.metric == "distinct" and GateSpec().floor_k == 2.0
    for bad, frag in [
        ("floor_k = -1\n", "floor_k must be > 0"),
        ('[diversity]\nmetric = "vibes"\n', "is not known"),
        ('[attractors]\nwanted = "sideways"\n', "use up or down"),
        ("[memorisation]\nk = 2\n", "k must be >= 4"),
        ("colour = 1\n", "the spec has unknown key(s) colour"),
        (
            "[memorisation]\ntreshold = 1\n",
            "[memorisation] has unknown key(s) treshold (it takes gate, threshold, k)",
        ),
        ("[memorisation]\nthreshold = 200\n", "threshold must be <= 100"),
        ('[diversity]\ngate = "yes"\n', "must be true or false"),
    ]:
        p.write_text(bad)
        with pytest.raises(TuneproofError) as e:
            read_spec(p)
        assert frag in e.value.message, bad
        assert e.value.message.count(str(p)) == 1  # the path once


def test_mined_scores_follow_the_informative_dirichlet_log_odds_by_hand() -> None:
    a = Arm(
        name="o",
        sources=("o",),
        runs={"0": {"p": ["alpha beta gamma alpha"], "q": ["alpha delta beta"], "r": ["solo solo"]}},
    )
    reference = "beta gamma delta delta epsilon"
    got = {m.phrase: m for m in mine(a, reference, top=100, max_words=2)}
    # unigrams: outputs alpha 3, beta 2, gamma 1, delta 1, solo 2 (9 words); reference 5 words
    y_total, r_total, a0 = 9, 5, 1000.0

    def z(y: int, r: int) -> float:
        prior = a0 * (y + r) / (y_total + r_total)
        d = math.log((y + prior) / (y_total + a0 - y - prior)) - math.log(
            (r + prior) / (r_total + a0 - r - prior)
        )
        return d / math.sqrt(1 / (y + prior) + 1 / (r + prior))

    assert got["alpha"].z == pytest.approx(z(3, 0), rel=1e-12)
    assert (got["alpha"].count, got["alpha"].reference_count, got["alpha"].num_prompts) == (3, 0, 2)
    assert "beta" not in got or got["beta"].z == pytest.approx(z(2, 1), rel=1e-12)
    assert "solo" not in got  # one prompt only
    assert "gamma" not in got  # under one prompt only
    assert all(len(p.split()) <= 2 for p in got)
    assert list(got) == sorted(got, key=lambda p: -got[p].z)  # best first


@pytest.mark.parametrize(
    "a,b,count_a,count_b,same",
    [
        ("a testament to", "is a testament", 94, 94, True),  # overlap by all but one word
        ("a testament to", "testament to the", 94, 80, True),
        ("a testament to", "is a testament", 94, 40, False),  # counts too far apart
        ("a testament", "a testament to", 94, 94, True),  # inside
        ("to the craft", "a testament to", 94, 94, False),  # overlap of one word only
        ("testament", "testaments are", 94, 94, False),  # not on word boundaries
    ],
)
def test_pieces_of_one_phrase_are_folded(a: str, b: str, count_a: int, count_b: int, same: bool) -> None:
    from tuneproof.gate.attractors import MinedPhrase, _same_hits

    assert (
        _same_hits(
            MinedPhrase(phrase=a, z=1.0, count=count_a, reference_count=0, num_prompts=2),
            MinedPhrase(phrase=b, z=1.0, count=count_b, reference_count=0, num_prompts=2),
        )
        is same
    )
    assert (
        _same_hits(
            MinedPhrase(phrase=b, z=1.0, count=count_b, reference_count=0, num_prompts=2),
            MinedPhrase(phrase=a, z=1.0, count=count_a, reference_count=0, num_prompts=2),
        )
        is same
    )


def test_sorted_unique_and_a_window_as_long_as_the_text() -> None:
    from tuneproof.gate.memorise import sorted_unique

    h = np.array([5, 1, 5, 3, 1, 9], dtype=np.uint64)
    assert sorted_unique(h.copy()).tolist() == [1, 3, 5, 9]
    runs = np.array([1, 4, 4, 7, 2, 4, 8], dtype=np.uint64)  # two sorted runs
    assert sorted_unique(runs, runs=True).tolist() == [1, 2, 4, 7, 8]
    assert sorted_unique(np.array([], dtype=np.uint64)).tolist() == []
    assert sorted_unique(np.array([7], dtype=np.uint64)).tolist() == [7]
    values = np.arange(1, 9, dtype=np.uint64)
    assert window_hashes(values, 8).tolist() == _naive_hash(list(range(1, 9)), 8)
    assert window_hashes(values, 8).dtype == np.uint64


def test_a_cache_that_cannot_be_written_is_reported_not_fatal(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("TUNEPROOF_CACHE", str(blocker / "cache"))
    corpus = tmp_path / "c.txt"
    corpus.write_text(" ".join(f"w{i}" for i in range(40)))
    index = build_index([corpus], k=4)
    assert index.cached.startswith("built (not cached:") and index.hashes.size == 37
    monkeypatch.setenv("TUNEPROOF_CACHE", str(tmp_path / "cache"))
    cached = build_index([corpus], k=4)
    assert cached.cached.startswith("built and cached in")
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted(
        [
            Path(cached.cached.split(" in ")[-1]).name,
            Path(cached.cached.split(" in ")[-1]).with_suffix(".json").name,
        ]
    )  # no temporary file is left behind
    # a damaged cache entry is rebuilt, not trusted
    entry = Path(cached.cached.split(" in ")[-1])
    entry.write_bytes(b"garbage")
    again = build_index([corpus], k=4)
    assert again.cached.startswith("built and cached") and np.array_equal(again.hashes, index.hashes)
    # and so is an entry whose record was written for another corpus (a name collision, a stale tool)
    meta = json.loads(entry.with_suffix(".json").read_text())
    entry.with_suffix(".json").write_text(json.dumps({**meta, "key": "0" * 64}))
    assert build_index([corpus], k=4).cached.startswith("built and cached")
    assert build_index([corpus], k=4).cached.startswith("loaded from")


def test_mined_phrases_stay_inside_a_clause() -> None:
    texts = ["The light. The market, the stone", "the light. The market; the stone", "The light: the market"]
    a = Arm(name="o", sources=("o",), runs={"0": {f"p{i}": [t] for i, t in enumerate(texts)}})
    phrases = [m.phrase for m in mine(a, "a human reference about nothing in particular", top=100)]
    assert "light the" not in phrases and "the light the" not in phrases and "market the" not in phrases
    assert "the light" in phrases


@pytest.mark.parametrize(
    "row,fragment",
    [
        ({"prompt_id": "", "prompt": "hi"}, "no 'prompt_id'"),
        ({"prompt_id": "a", "prompt": "hi", "messages": [{"role": "user", "content": "x"}]}, "both 'prompt'"),
        ({"prompt_id": "a", "messages": [{"role": "user"}]}, "needs a non-empty string 'prompt'"),
        ({"prompt_id": True, "prompt": "hi"}, "no 'prompt_id'"),
    ],
)
def test_bad_prompt_rows_are_refused(tmp_path: Path, row: dict, fragment: str) -> None:
    from tuneproof.gate.generate import read_prompts

    p = _jsonl(tmp_path / "p.jsonl", [row])
    with pytest.raises(TuneproofError) as e:
        read_prompts(p)
    assert fragment in e.value.message


def test_empty_patterns_in_a_probe_are_refused(tmp_path: Path) -> None:
    for detector in ('regex = [""]', 'phrases = [""]', "regex = [3]"):
        p = tmp_path / "p.toml"
        p.write_text(PROBE.replace('regex = ["x+"]', detector))
        with pytest.raises(TuneproofError, match="an empty or non-string pattern"):
            read_probes(p)


def test_a_stock_phrase_is_mined_whole_not_in_pieces() -> None:
    texts = {f"p{i}": [f"I cannot help with that. The w{i} and w{i + 1}."] for i in range(12)}
    a = Arm(name="o", sources=("o",), runs={"0": texts})
    phrases = [m.phrase for m in mine(a, " ".join(f"human{i} words" for i in range(300)), top=5)]
    assert any(p in phrases for p in ("i cannot help", "cannot help with", "help with that"))
    assert not {"cannot", "help", "cannot help"} & set(phrases)


def test_every_mined_phrase_is_found_by_the_matcher_as_often_as_mined() -> None:
    texts = [
        "I can't help with that. A rock-solid plan costs $5 here – silver mornings & 'quoted words'.",
        "Honestly, I can't help you; a rock-solid plan (costs $5) – silver mornings...",
        "They said: I can’t help it — a rock-solid plan, $5 and silver mornings!",
    ]
    a = Arm(name="o", sources=("o",), runs={"0": {f"p{i}": [t] for i, t in enumerate(texts)}})
    mined = mine(a, "a plain human reference with other words in it " * 30, top=200)
    phrases = " | ".join(m.phrase for m in mined)
    assert "can't help" in phrases and "rock-solid plan" in phrases and "silver mornings" in phrases
    for m in mined:
        found = sum(PhraseMatcher([m.phrase]).count(t) for t in texts)
        assert found == m.count, (m.phrase, found, m.count)


def test_missing_values_and_boundaries_of_the_verdict() -> None:
    nan = float("nan")
    base = np.array([[1.0, 2.0, nan, 4.0], [1.2, nan, nan, 4.2]])
    tuned = np.array([[2.0, 3.0, 9.0, 5.0], [2.2, 3.2, 9.0, nan]])
    r = stats.judge_metric("m", "up", base, tuned, Floor.given(0.5))
    # prompt 3 has no base value in any run: left out; the others average the runs they have
    assert r.num_prompts == 3
    assert r.delta == pytest.approx(((2.1 - 1.1) + (3.1 - 2.0) + (5.0 - 4.1)) / 3)
    # the A/A noise pairs only prompts with a value in both runs: base (0, 3), tuned (0, 1, 2)
    sd, pairs = stats.noise_sd(base, tuned)
    d_b, d_t = np.array([-0.2, -0.2]), np.array([-0.2, -0.2, 0.0])
    assert pairs == 2 and sd == pytest.approx(
        math.sqrt((np.var(d_b, ddof=1) / 2 + np.var(d_t, ddof=1) / 3) / 2)
    )
    # one prompt is too few to judge; two are enough
    assert stats.judge_metric("m", "up", base[:, :1], tuned[:, :1], Floor.given(0.1)).verdict is None
    assert stats.judge_metric("m", "up", base[:, :2], tuned[:, :2], Floor.given(0.1)).num_prompts == 2
    # three runs and more prompts than runs
    many = np.random.default_rng(3).normal(size=(3, 9))
    assert stats.noise_sd(many, many)[1] == 6


def test_the_interval_decides_and_a_floor_to_beat_or_a_no_change_band_is_kept() -> None:
    # _verdict(wanted, delta, floor, bar, ci, test): the interval decides; `bar` must be beaten as well
    assert stats._verdict("up", 0.5, 0.5, None, (0.4, 0.6), None)[0] == PASS  # floor shown, not a bar
    assert stats._verdict("up", 0.5, 0.5, 0.5, (0.4, 0.6), None)[0] == INCONCLUSIVE  # at the bar: not beyond
    assert stats._verdict("up", 0.51, 0.5, 0.5, (0.4, 0.6), None)[0] == PASS
    # the interval spans or touches 0: not called
    assert stats._verdict("up", 0.6, 0.5, None, (-0.1, 1.3), None)[0] == INCONCLUSIVE
    assert stats._verdict("up", 0.6, 0.5, None, (0.0, 1.2), None)[0] == INCONCLUSIVE
    assert stats._verdict("down", -0.6, 0.5, None, (-1.2, 0.0), None)[0] == INCONCLUSIVE
    assert stats._verdict("down", -0.6, 0.5, None, (-1.2, -0.01), None)[0] == PASS
    assert stats._verdict("up", -0.6, 0.5, None, (-1.2, -0.01), None)[0] == FAIL
    # the paired test must reject too when there is one
    assert stats._verdict("up", 0.6, 0.5, None, (0.1, 1.1), ("McNemar", 0.05))[0] == INCONCLUSIVE
    assert stats._verdict("up", 0.6, 0.5, None, (0.1, 1.1), ("McNemar", 0.049))[0] == PASS
    # no change: the interval inside +-floor (edges included), and a floor of 0 never shows it
    assert stats._verdict("no-change", 0.0, 0.5, None, (-0.5, 0.5), None)[0] == PASS
    assert stats._verdict("no-change", 0.0, 0.5, None, (-0.51, 0.5), None)[0] == INCONCLUSIVE
    assert stats._verdict("no-change", 0.0, 0.0, None, (0.0, 0.0), None)[0] == INCONCLUSIVE
    assert stats._verdict("no-change", 0.9, 0.5, None, (0.6, 1.2), None)[0] == FAIL


def test_the_bootstrap_interval_is_the_percentile_interval_of_resampled_means() -> None:
    d = np.arange(100.0)  # more than 64 distinct values: prompts resampled
    low, high = stats.paired_ci95(d)
    rng = np.random.default_rng(stats.BOOTSTRAP_SEED)
    means = d[rng.integers(0, 100, size=(stats.BOOTSTRAP_RESAMPLES, 100))].mean(axis=1)
    assert (low, high) == tuple(np.percentile(means, [2.5, 97.5]))
    # few distinct values (0/1 scores): their counts resampled, the same law in a fraction of the time
    few = np.random.default_rng(2).choice([-1.0, 0.0, 1.0], size=1319, p=[0.2, 0.6, 0.2])
    counts_lo, counts_hi = stats.paired_ci95(few)
    resampled = few[np.random.default_rng(5).integers(0, 1319, size=(4000, 1319))].mean(axis=1)
    want_lo, want_hi = np.percentile(resampled, [2.5, 97.5])
    assert counts_lo == pytest.approx(want_lo, abs=0.004) and counts_hi == pytest.approx(want_hi, abs=0.004)
    big = np.random.default_rng(0).normal(size=5000)  # chunked resampling gives the same kind of answer
    lo2, hi2 = stats.paired_ci95(big)
    assert lo2 < big.mean() < hi2 and hi2 - lo2 == pytest.approx(
        2 * 1.96 * big.std() / math.sqrt(5000), rel=0.15
    )


def test_model_folders_that_are_not_models_are_refused_in_one_line(tmp_path: Path, monkeypatch) -> None:
    from tuneproof.gate.diversity import load_embedder
    from tuneproof.gate.tokens import load_tokenizer

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json")
    (broken / "model.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(TuneproofError) as e:
        load_embedder(str(broken))
    assert e.value.message.startswith(f"cannot load the embedder {broken}: ") and "\n" not in e.value.message
    with pytest.raises(TuneproofError) as e:
        load_tokenizer(str(broken))
    assert (
        e.value.message.startswith(f"cannot load a tokenizer from {broken}: ") and "\n" not in e.value.message
    )
    with pytest.raises(TuneproofError, match="holds no tokenizer files"):
        load_tokenizer(str(tmp_path))
    # neither embedding package installed: said so, with what to install
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(TuneproofError) as e:
        load_embedder(str(broken))
    assert "model2vec and sentence-transformers are not installed" in e.value.message
    assert "pip install 'tuneproof[embed]'" in e.value.message


def test_spans_of_words_keep_the_original_spacing() -> None:
    t = Tokens()
    assert t.span("one  two\tthree four", 1, 2) == "two\tthree"
    assert t.span("one two", 5, 2) == ""


def test_corpus_reading_in_blocks_marks_and_offsets(tmp_path: Path, monkeypatch) -> None:
    import tuneproof.gate.memorise as mem

    words = [f"w{i}" for i in range(60)]
    plain = tmp_path / "plain.txt"
    plain.write_text(" ".join(words))
    bom = tmp_path / "bom.txt"
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    reference = build_index([plain], k=4, use_cache=False)
    assert np.array_equal(
        build_index([bom], k=4, use_cache=False).hashes, reference.hashes
    )  # the mark is no word
    # jsonl rows gathered into blocks: the same windows whatever the block size, none across two rows
    rows = [{"text": " ".join(words[i : i + 10])} for i in range(0, 60, 10)]
    corpus = _jsonl(tmp_path / "c.jsonl", rows)
    whole = build_index([corpus], k=4, use_cache=False)
    monkeypatch.setattr(mem, "_PIECE_BYTES", 25)
    assert np.array_equal(build_index([corpus], k=4, use_cache=False).hashes, whole.hashes)
    assert whole.hashes.size == 6 * (10 - 4 + 1)
    # a bad byte in a later block is named by its offset in the file
    lines = "\n".join(" ".join(words[i : i + 5]) for i in range(0, 60, 5)).encode()
    bad = tmp_path / "bad.txt"
    bad.write_bytes(lines[:100] + b"\xff" + lines[100:])
    with pytest.raises(TuneproofError, match=r"invalid UTF-8 at byte 100\b"):
        build_index([bad], k=4, use_cache=False)


def test_the_hub_is_offline_only_while_the_embedder_loads(tmp_path: Path, monkeypatch) -> None:
    import importlib.util
    import os

    from tuneproof.gate.diversity import load_embedder

    seen: list[str | None] = []

    def find_spec(name: str, *a: object) -> None:  # neither embedding package: the load fails inside
        seen.append(os.environ.get("HF_HUB_OFFLINE"))

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    for before in (None, "0"):
        if before is None:
            monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        else:
            monkeypatch.setenv("HF_HUB_OFFLINE", before)
        with pytest.raises(TuneproofError, match="not installed"):
            load_embedder(str(tmp_path))
        assert os.environ.get("HF_HUB_OFFLINE") == before  # as it was, after a failed load too
    assert seen and set(seen) == {"1"}


def test_a_loaded_embedder_leaves_the_environment_as_it_was(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("model2vec")
    import os

    from model2vec import StaticModel
    from tokenizers import Tokenizer, models, pre_tokenizers

    from tuneproof.gate.diversity import load_embedder

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "red": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    StaticModel(np.eye(3, dtype=np.float32), tok).save_pretrained(str(tmp_path / "m2v"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    before = dict(os.environ)
    embed = load_embedder(str(tmp_path / "m2v"))
    assert dict(os.environ) == before and embed(["red", "red"]).shape[0] == 2


def test_an_adapter_made_for_another_base_is_one_line(tmp_path: Path, capsys) -> None:
    """`generate --adapter` with an adapter of another model gave PEFT's warnings and a traceback."""
    import ship_fakes as fx
    from tuneproof.cli.app import main

    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    (tmp_path / "p.jsonl").write_text('{"prompt_id": "p0", "prompt": "Hello"}\n')
    args = ["generate", "--model", "tiny", "--adapter", str(tmp_path / "adapter"),
            "--prompts", str(tmp_path / "p.jsonl"), "--out", str(tmp_path / "o.jsonl")]  # fmt: skip
    capsys.readouterr()  # what making the fake adapter printed (PEFT's own warnings) is not the command's
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not fit this model (size mismatch for" in err
    assert not (tmp_path / "o.jsonl").exists()
