"""Merge memory goal: `tuneproof merge` against PEFT `merge_and_unload` + `save_pretrained`, same run.

The base is a Llama-shaped model of about 2 GB in bf16 (random weights, built here, never downloaded),
saved by transformers in 4 shards; the adapter is a rank-16 LoRA on every attention and MLP linear
with random B (as if trained). Each side runs in its own process (`tuneproof merge` as the command a
user runs), so its peak resident memory (ru_maxrss) is its own, imports included.

Goal: tuneproof's peak RSS at most 2x the largest shard plus the adapter, and at most 1/3 of PEFT's.
Both outputs are compared tensor by tensor afterwards.

    .venv/bin/python bench/merge.py [--small]     (--small: a ~200 MB model, for a quick look)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUILD = r"""
import sys, torch
from transformers import LlamaConfig, AutoModelForCausalLM
from peft import LoraConfig, get_peft_model
folder, hidden, inter, layers, vocab, shard = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
cfg = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                  num_attention_heads=16, num_key_value_heads=4, vocab_size=vocab, tie_word_embeddings=False)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
model.save_pretrained(f"{folder}/base", max_shard_size=shard)
lora = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0))
with torch.no_grad():
    for name, p in lora.named_parameters():
        if "lora_B" in name:
            p.normal_(0, 0.02)
lora.save_pretrained(f"{folder}/adapter")
"""
OURS = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
subprocess.run([sys.argv[1], "merge", "--base", sys.argv[2], "--adapter", sys.argv[3], "--out", sys.argv[4]],
               check=True, capture_output=True)
print(json.dumps({"seconds": time.perf_counter() - t0,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
"""
PEFT = r"""
import json, resource, sys, time, torch
t0 = time.perf_counter()
from transformers import AutoModelForCausalLM
from peft import PeftModel
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16)
merged = PeftModel.from_pretrained(model, sys.argv[2]).merge_and_unload()
merged.save_pretrained(sys.argv[3])
print(json.dumps({"seconds": time.perf_counter() - t0,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""
COMPARE = r"""
import json, sys
from pathlib import Path
from safetensors import safe_open
def where(folder):
    return {k: f for f in sorted(Path(folder).glob("*.safetensors")) for k in safe_open(f, "pt").keys()}
a, b = where(sys.argv[1]), where(sys.argv[2])
assert a.keys() == b.keys(), sorted(set(a) ^ set(b))[:5]
worst = 0.0
for k in sorted(a):
    with safe_open(a[k], "pt") as fa, safe_open(b[k], "pt") as fb:
        x, y = fa.get_tensor(k).float(), fb.get_tensor(k).float()
    worst = max(worst, float(((x - y).abs() / (y.abs() + 1e-3)).max()))
print(json.dumps({"tensors": len(a), "max_rel_diff": worst}))
"""


def run(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"bench step failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="a ~200 MB model instead of ~2 GB")
    args = parser.parse_args()
    # hidden, intermediate, layers, vocab, shard size: ~1.1 B params (about 2 GB in bf16) in 4 shards
    shape = (1024, 2816, 6, 32000, "60MB") if args.small else (2048, 5632, 22, 32000, "600MB")
    with tempfile.TemporaryDirectory(prefix="tuneproof-merge-bench-") as tmp:
        d = Path(tmp)
        t = time.perf_counter()
        run(BUILD, d, *shape)
        shards = sorted((d / "base").glob("*.safetensors"))
        largest = max(p.stat().st_size for p in shards)
        adapter = (d / "adapter" / "adapter_model.safetensors").stat().st_size
        total = sum(p.stat().st_size for p in shards)
        print(f"model: {total / 2**30:.2f} GiB in {len(shards)} shards (largest {largest / 2**20:.0f} MiB), "
              f"adapter {adapter / 2**20:.0f} MiB; built in {time.perf_counter() - t:.0f} s")  # fmt: skip
        tuneproof = Path(sys.executable).parent / "tuneproof"
        ours = run(OURS, tuneproof, d / "base", d / "adapter", d / "ours")
        peft = run(PEFT, d / "base", d / "adapter", d / "peft")
        same = run(COMPARE, d / "ours", d / "peft")
    goal = 2 * largest + adapter
    print(f"tuneproof merge: peak RSS {ours['peak_rss_bytes'] / 2**20:,.0f} MiB, {ours['seconds']:.1f} s")
    print(f"PEFT merge_and_unload + save_pretrained: peak RSS {peft['peak_rss_bytes'] / 2**20:,.0f} MiB, "
          f"{peft['seconds']:.1f} s")  # fmt: skip
    ratio = ours["peak_rss_bytes"] / peft["peak_rss_bytes"]
    print(f"ratio tuneproof / PEFT peak RSS: {ratio:.3f} (goal <= 0.333)")
    print(f"tuneproof peak / (2 x largest shard + adapter): {ours['peak_rss_bytes'] / goal:.3f} (goal <= 1)")
    print(f"outputs: {same['tensors']} tensors, max relative difference vs PEFT {same['max_rel_diff']:.2e}")
    met = ours["peak_rss_bytes"] <= goal and ours["peak_rss_bytes"] * 3 <= peft["peak_rss_bytes"]
    print("goal met" if met else "GOAL NOT MET")
    if not met:
        sys.exit(1)


if __name__ == "__main__":
    main()
