"""Memory ledger speed goal: a full-size config's step sized in seconds, faster than building the model
on the meta device (what a module-tree estimate such as `accelerate estimate-memory` starts from).

For each published config in tests/data/configs: the median over `--repeats` of
1. the prediction: `tuneproof.commands.memory` prepare + run (the norm inventory from a meta copy of
   the first layers, every layer's activations, the walk), with the config already read; then with
   the fit on an H100 too (the largest batch and width: some forty more walks);
2. the baseline: `AutoModelForCausalLM.from_config` on the meta device, the whole model.
The ratio baseline / prediction is printed per config with the median of the ratios; both run in one
process, after one warm-up each (imports and transformers' lazy modules paid once).

    .venv/bin/python bench/memory.py [--repeats N] [--configs a.json,b.json]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

CONFIGS = Path(__file__).parent.parent / "tests" / "data" / "configs"
DEFAULT = ("llama-3.1-8b.json", "qwen3-30b-a3b.json", "gemma-4-26b-a4b.json", "gpt-oss-20b.json",
           "mixtral-8x7b.json", "qwen3-32b.json")  # fmt: skip


def _predict(path: Path, gpu: str | None = None) -> float:
    from tuneproof.arch import resolve
    from tuneproof.commands.memory import MemorySpec, prepare, run
    from tuneproof.runs.step import Step

    model = resolve(path)  # read once, as the command does before sizing
    start = time.perf_counter()
    run(prepare(MemorySpec(model=model, run=Step(seq_len=4096, mode="lora"), gpu=gpu)))
    return time.perf_counter() - start


def _meta_build(path: Path) -> float:
    from tuneproof.arch import resolve
    from tuneproof.arch.construct import meta_model

    config = resolve(path).config
    start = time.perf_counter()
    meta_model(config)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--configs", default=",".join(DEFAULT))
    args = parser.parse_args()
    paths = [CONFIGS / name for name in args.configs.split(",")]
    _predict(paths[0]), _meta_build(paths[0])  # warm-up: imports, transformers' lazy modules
    ratios = []
    print(f"{'config':28s} {'ledger s':>9s} {'+ fit s':>8s} {'meta build s':>13s} {'build/ledger':>13s}")
    for path in paths:
        predicted = statistics.median(_predict(path) for _ in range(args.repeats))
        fitted = statistics.median(_predict(path, "H100") for _ in range(args.repeats))
        built = statistics.median(_meta_build(path) for _ in range(args.repeats))
        ratios.append(built / predicted)
        print(f"{path.stem:28s} {predicted:9.3f} {fitted:8.3f} {built:13.3f} {ratios[-1]:12.1f}x")
    print(f"median ratio (meta build / prediction): {statistics.median(ratios):.1f}x")


if __name__ == "__main__":
    main()
