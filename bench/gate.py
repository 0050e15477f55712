"""Gate speed and memory goals, each against its named baseline measured in the same run.

1. Memorisation index build at 10 M and 100 M corpus tokens (k = 32, whitespace words, Zipf-distributed
   vocabulary of 50,000 words), against a naive Python set of k-gram tuples at 10 M (it does not fit in
   memory at 100 M). Goals: >= 10x faster to build than the set; the index at most 16 bytes per corpus
   token.
2. Query: 1 M response tokens against the 10 M and the 100 M index. Goal: under 5 s at 100 M.
3. The whole gate (`tuneproof gate`, no embedder) on 500 prompts x 10 samples x 2 runs x 2 arms, with an
   attractor list of 1,000 phrases, one probe and the 10 M corpus (index cached by step 1). Goal: under 60 s.

Each measurement runs in its own process, so its peak memory (ru_maxrss) is its own. Times are wall
seconds of one run on this machine: quote the ratios, not the absolute times.

    .venv/bin/python bench/gate.py [--small]     (--small: 1 M / 10 M tokens, for a quick look)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

K = 32
VOCAB = 50_000
WORKER = r"""
import json, resource, sys, time
mode, path, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
if mode == "naive":
    words = open(path).read().split()
    grams = {tuple(words[i : i + k]) for i in range(len(words) - k + 1)}
    out = {"entries": len(grams), "tokens": len(words)}
elif mode == "ours":
    from tuneproof.gate.memorise import build_index
    t0 = time.perf_counter()  # the build, not the imports
    index = build_index([path], k=k)
    out = {"entries": int(index.hashes.size), "tokens": index.num_tokens}
    out["index_bytes"] = int(index.hashes.nbytes)
else:
    from tuneproof.gate.memorise import build_index, query
    index = build_index([path], k=k)  # from the cache written by the build step
    texts = json.load(open(sys.argv[4]))
    t0 = time.perf_counter()
    hit, longest = query(index, texts)
    out = {"responses": len(texts), "hits": int(hit.sum()), "longest": int(longest.max()),
           "tokens": sum(len(t.split()) for t in texts)}
out["seconds"] = time.perf_counter() - t0
out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def zipf_words(rng: np.random.Generator, n: int, vocab: np.ndarray) -> np.ndarray:
    ranks = np.arange(1, vocab.size + 1)
    p = 1.0 / ranks**1.1
    return vocab[rng.choice(vocab.size, size=n, p=p / p.sum())]


def write_corpus(path: Path, tokens: int, vocab: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for lo in range(0, tokens, 1_000_000):
            words = zipf_words(rng, min(1_000_000, tokens - lo), vocab)
            lines = [" ".join(words[i : i + 16]) for i in range(0, words.size, 16)]
            f.write("\n".join(lines) + "\n")


def run_worker(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", WORKER, *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"worker {args[0]} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def responses(corpus_words: list[str], num: int, words_each: int, seed: int, vocab: np.ndarray) -> list[str]:
    """Model-like responses; 1 in 50 carries a 60-word span copied from the corpus."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(num):
        text = zipf_words(rng, words_each, vocab).tolist()
        if i % 50 == 0:
            lo = int(rng.integers(0, len(corpus_words) - 60))
            text[10:70] = corpus_words[lo : lo + 60]
        out.append(" ".join(text))
    return out


def gate_arms(folder: Path, vocab: np.ndarray) -> tuple[Path, Path, Path, Path]:
    rng = np.random.default_rng(7)
    phrases = [" ".join(zipf_words(rng, int(rng.integers(2, 4)), vocab)) for _ in range(1000)]
    (folder / "attractors.txt").write_text("\n".join(phrases) + "\n")
    (folder / "probes.toml").write_text(
        '[[probe]]\nname = "refusal"\nhypothesis = "tuning does not change refusals"\nexpect = "no-change"\n'
        'prompts = "*"\nphrases = ["i cannot help"]\n'
    )
    arms = []
    for name, seed in (("base", 1), ("tuned", 2)):
        r = np.random.default_rng(seed)
        path = folder / f"{name}.jsonl"
        with open(path, "w") as f:
            for run in range(2):
                for p in range(500):
                    for s in range(10):
                        text = " ".join(zipf_words(r, 120, vocab))
                        row = {"prompt_id": f"p{p}", "run": run, "sample": s, "text": text}
                        f.write(json.dumps(row) + "\n")
        arms.append(path)
    return arms[0], arms[1], folder / "attractors.txt", folder / "probes.toml"


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--small", action="store_true", help="1 M / 10 M tokens: a quick look, goals not judged"
    )
    small = parser.parse_args().small
    sizes = (1_000_000, 10_000_000) if small else (10_000_000, 100_000_000)
    vocab = np.array([f"w{i}" for i in range(VOCAB)])
    with tempfile.TemporaryDirectory(prefix="tuneproof-bench-gate-") as tmp:
        folder = Path(tmp)
        os.environ["TUNEPROOF_CACHE"] = str(folder / "cache")
        corpora = {}
        for n in sizes:
            corpora[n] = folder / f"corpus_{n}.txt"
            t0 = time.perf_counter()
            write_corpus(corpora[n], n, vocab, seed=n)
            print(f"corpus of {n:,} tokens written in {time.perf_counter() - t0:.1f} s", flush=True)

        naive = run_worker("naive", str(corpora[sizes[0]]), str(K))
        peak = naive["peak_rss_bytes"]
        print(
            f"naive set of {K}-gram tuples, {sizes[0]:,} tokens: {naive['seconds']:.1f} s, "
            f"peak {peak / 2**30:.2f} GiB ({peak / naive['tokens']:.0f} B/token)",
            flush=True,
        )
        ours = {}
        for n in sizes:
            ours[n] = r = run_worker("ours", str(corpora[n]), str(K))
            per = r["index_bytes"] / r["tokens"]
            print(
                f"tuneproof index, {n:,} tokens: build {r['seconds']:.1f} s, index {per:.2f} B/token "
                f"({r['entries']:,} distinct windows), build peak {r['peak_rss_bytes'] / 2**30:.2f} GiB",
                flush=True,
            )
        speedup = naive["seconds"] / ours[sizes[0]]["seconds"]
        per_token = max(r["index_bytes"] / r["tokens"] for r in ours.values())
        judged = (
            "not judged at --small sizes (the goal is at 10 M)"
            if small
            else ("met" if speedup >= 10 else "NOT met")
        )
        print(
            f"GOAL build >= 10x faster than the naive set at {sizes[0]:,} tokens: {speedup:.1f}x -> {judged}"
        )
        verdict = "met" if per_token <= 16 else "NOT met"
        print(f"GOAL index <= 16 B per corpus token: {per_token:.2f} -> {verdict}")

        for n in sizes:  # query throughput against each index; 1 in 50 responses quotes that corpus
            with open(corpora[n]) as f:
                corpus_words = f.read(4_000_000).split()
            texts = responses(corpus_words[:-1], 2_000 if not small else 200, 500, 3, vocab)
            texts_file = folder / "responses.json"
            texts_file.write_text(json.dumps(texts))
            q = run_worker("query", str(corpora[n]), str(K), str(texts_file))
            rate = q["tokens"] / q["seconds"]
            print(
                f"query {q['tokens']:,} response tokens against the {n:,}-token index: {q['seconds']:.2f} s "
                f"({rate / 1e6:.2f} M tokens/s), {q['hits']} responses with a hit, "
                f"longest {q['longest']} tokens",
                flush=True,
            )
        one_m = 1_000_000 / rate  # against the largest index
        met = "met" if one_m < 5 else "NOT met"
        judged = "not judged at --small sizes (the goal is against 100 M)" if small else met
        print(f"GOAL 1 M response tokens in < 5 s: {one_m:.2f} s (scaled from {q['tokens']:,}) -> {judged}")

        base, tuned, attractors, probes = gate_arms(folder, vocab)
        args = [
            "gate", "--base", str(base), "--tuned", str(tuned), "--attractors", str(attractors),
            "--probes", str(probes), "--corpus", str(corpora[sizes[0]]), "--json",
        ]  # fmt: skip
        entry = "import sys; from tuneproof.cli.app import main; sys.exit(main(sys.argv[1:]))"
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", entry, *args], capture_output=True, text=True, check=False
        )
        wall = time.perf_counter() - t0
        if out.returncode not in (0, 1, 3):
            raise SystemExit(f"gate failed: {out.stderr[-2000:]}")
        report = json.loads(out.stdout)
        print(
            f"whole gate, 500 prompts x 10 samples x 2 runs x 2 arms (20,000 responses), 1,000 attractors, "
            f"1 probe, {sizes[0]:,}-token corpus (index cached): {wall:.1f} s, verdict {report['verdict']}"
        )
        print(f"GOAL whole gate < 60 s: {wall:.1f} s -> {'met' if wall < 60 else 'NOT met'}")


if __name__ == "__main__":
    main()
