"""Every option of every command, fed bad values: exit 2, one `error:` line naming what to fix, no
traceback, nothing written. The table must cover every option (a new option without bad values
fails `test_every_option_has_bad_values`)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tuneproof.cli.app import app, main

# Files made once per session by the `files` fixture, referred to by name in the table.
FILE_VALUES = (
    "@missing",
    "@folder",
    "@not-json",
    "@empty",
    "@only-model-type",
    "@nan-field",
    "@string-size",
    "@kv-heads",
    "@layers-1e9",
    "@bad-gzip",
    "@no-events",
    "@nan-duration",
    "@file",
    "@under-a-file",
    "@proc",
)

CONFIG = [
    ("@missing", "config not found"),
    ("@folder", "config not found"),
    ("@not-json", "not valid JSON"),
    ("@only-model-type", "holds none of"),
    ("@nan-field", "rms_norm_eps is nan"),
    ("@string-size", "hidden_size is 'abc'"),
    ("@kv-heads", "num_key_value_heads 64 is above num_attention_heads 32"),
    ("@layers-1e9", "num_hidden_layers 1,000,000,000 is above 4,096"),
    ("@empty", "not valid JSON"),
    ("/proc/self/mem", "config /proc/self/mem cannot be read"),  # these three found by a fresh-eyes trial
    ("/dev/null", "config /dev/null is not a regular file"),
    ("", "is empty"),  # a path option says "is empty: pass a path", never takes "" as "."
]
OUT = [("@file", "is a file"), ("@under-a-file", "is not a folder"), ("@proc", "cannot be written")]
OUT_FILE = [
    ("@folder", "exists and is not a file"),
    ("@under-a-file", "is a file"),
    ("/proc/tuneproof/out.json", "cannot be written"),
    ("", "is empty: pass a path"),
]
ARM_FILES = [
    ("@missing", "arm file not found"),
    ("@folder", "holds no lm-eval results_<date>.json or samples_<task>_<date>.jsonl"),
    ("@empty", "holds no responses"),
    ("@not-json", "not JSON"),
    ("@bad-gzip-arm", "cannot read"),
    ("@arm-no-text", "no 'text'"),
    ("@bad-utf8", "invalid UTF-8"),
    ("@arm-1run", "need >= 2 runs per arm to measure the instrument's noise; got"),
]

BAD: dict[str, dict[str, list[tuple[str, str]]]] = {
    "flops": {
        "--config": CONFIG,
        "--seq-len": [
            ("abc", "not a valid integer"),
            ("0", "--seq-len must be >= 1"),
            ("3000000000", "--seq-len must be <="),
        ],
        "--batch": [("-1", "--batch must be >= 1"), ("1.5", "not a valid integer")],
        "--attn": [("xformers", "--attn 'xformers' is not a known attention path")],
        "--padding-fraction": [
            ("nan", "--padding-fraction must be a finite number"),
            ("1", "must be < 1"),
            ("x", "not a valid float"),
        ],
        "--mode": [("qlora", "--mode 'qlora' is not known")],
        "--lora-rank": [("0", "--lora-rank must be >= 1")],
        "--lora-targets": [
            ("", "--lora-targets is empty"),
            ("nope_proj", "--lora-targets 'nope_proj' matches no"),
        ],
        "--lora-target-parameters": [
            ("experts.nope", "--lora-target-parameters 'experts.nope' matches no fused expert parameter"),
            ("all-linear", "--lora-target-parameters must be parameter names, got ('all-linear',)"),
            ("", "--lora-target-parameters '' names no parameter"),
        ],
        "--step-time": [
            ("nan", "--step-time must be a finite number"),
            ("-2", "--step-time must be >= 1e-06"),
            ("1e-200", "--step-time must be >= 1e-06"),
            ("1e9", "--step-time must be <= 1e+07"),
            ("1", "--step-time needs a peak"),
        ],
        "--gpu": [("Voodoo 5", "unknown GPU 'Voodoo 5' (--gpu)"), ("", "unknown GPU '' (--gpu)")],
        "--dtype": [("int3", "--dtype 'int3' is not known")],
        "--peak-tflops": [
            ("inf", "--peak-tflops must be a finite number"),
            ("0", "--peak-tflops must be >= 1e-06"),
            ("1e-200", "--peak-tflops must be >= 1e-06"),
            ("1e300", "--peak-tflops must be <= 1e+06"),
        ],
    },
    "explain": {
        "--config": CONFIG,
        "--seq-len": [("-5", "--seq-len must be >= 1"), ("x", "not a valid integer")],
        "--batch": [("0", "--batch must be >= 1")],
        "--attn": [("xformers", "--attn 'xformers' is not a known attention path")],
        "--dtype": [("fp8", "--dtype 'fp8' is not known")],
        "--capability": [("13.5", "unknown --capability '13.5'"), ("", "unknown --capability ''")],
        "--gpu": [("Voodoo", "unknown GPU 'Voodoo' (--gpu)")],
        "--dropout": [("1", "--dropout must be < 1"), ("-0.1", "--dropout must be >= 0"), ("inf", "finite")],
        "--cudnn": [("nine", "--cudnn 'nine' is not a cuDNN version"), ("7.6.5", "is out of range")],
        "--cuda": [("latest", "--cuda 'latest' is not a CUDA version"), ("9.2", "is not a CUDA version")],
        "--trace": [
            ("@missing", "trace not found"),
            ("@folder", "is a folder, not a file"),
            ("@not-json", "is not a readable JSON trace"),
            ("@bad-gzip", "is not a readable JSON trace"),
            ("@no-events", "has no traceEvents list"),
            ("@trace", "properties not recorded in the trace: no CUDA compute capability to explain for"),
        ],
    },
    "probe": {
        "--config": CONFIG,
        "--attn": [("flash_attention_2", "--attn 'flash_attention_2' is not known")],
        "--widths": [
            ("64,abc", "not a comma list"),
            ("64,128", "at least 3 distinct"),
            ("0,64,256", "--widths must be >= 2"),
            ("", "--widths is empty"),
            ("1024,2048,8192", "exceeds the model's max_position_embeddings"),
        ],
        "--batch": [("0", "--batch must be >= 1")],
        "--mode": [("train", "--mode 'train' is not known")],
        "--device": [("tpu", "--device 'tpu' is not known")],
        "--dtype": [("fp8", "--dtype 'fp8' is not known")],
        "--min-repeats": [("2", "--min-repeats must be >= 3")],
        "--max-repeats": [
            ("4", "--max-repeats 4 is below --min-repeats 6 (raise --max-repeats or lower --min-repeats)")
        ],
        "--budget": [("nan", "--budget must be a finite number"), ("0", "--budget must be > 0")],
        "--over-budget": [("maybe", "'maybe' is not one of 'refuse', 'floor'")],
        "--target": [("inf", "--target must be a finite number"), ("2", "--target must be <= 1")],
        "--profiles": [("0", "--profiles must be >= 1")],
        "--seed": [("-1", "--seed must be >= 0")],
        "--out": OUT,
    },
    "fit": {
        "--points": [
            ("@missing", "points file not found"),
            ("@folder", "is a folder, not a file"),
            ("@not-json", "missing column"),
            ("@empty", "missing column"),
            ("@falling.csv", "do not grow with width across 512-4,096 tokens"),
        ],
        "--at": [
            ("x", "--at 'x' is not a comma list"),
            ("0", "--at must be >= 1"),
            ("32768,,65536", "--at '32768,,65536' has an empty item"),
        ],
    },
    "kernels": {
        "--trace": [
            ("@missing", "trace not found"),
            ("@folder", "holds no .json or .gz trace"),  # a folder is one trace per rank; this one is empty
            ("@not-json", "is not a readable JSON trace"),
            ("@bad-gzip", "is not a readable JSON trace"),
            ("@no-events", "has no traceEvents list"),
            ("@nan-duration", "trace event 0 is malformed"),
            ("@twin-traces", "has the same bytes as"),
        ],
        "--top": [("0", "--top must be >= 1"), ("x", "not a valid integer")],
    },
    "peak": {
        "--device": [("tpu", "--device 'tpu' is not known")],
        "--dtype": [
            ("int4", "--dtype 'int4' is not known"),
            ("tf32", "--dtype tf32 on cpu: TF32 is an NVIDIA tensor-core mode"),
        ],
        "--max-seconds": [
            ("nan", "--max-seconds must be a finite number"),
            ("-1", "--max-seconds must be > 0"),
        ],
        "--gpu": [("Voodoo 5", "unknown GPU 'Voodoo 5' (--gpu)"), ("H100", "--gpu 'H100' with --device cpu")],
    },
    "doctor": {
        "--config": CONFIG,
        "--out": OUT,
        "--report": OUT,
        "--probe-budget": [
            ("nan", "--probe-budget must be a finite number"),
            ("0", "--probe-budget must be > 0"),
        ],
    },
    "adjudicate": {
        "--config": CONFIG,
        "--widths": [
            ("1", "--widths must be >= 2"),
            ("a", "not a comma list"),
            ("64,99999", "exceeds the model's max_position_embeddings"),
        ],
        "--backends": [("xformers", "--backends 'xformers' is not known"), ("", "--backends is empty")],
        "--dtype": [("fp32", "--dtype 'fp32' is not known")],
        "--grads": [("maybe", "--grads 'maybe' is not known")],
        "--criterion": [("vibes", "--criterion 'vibes' is not known")],
        "--budget": [("nan", "--budget must be a finite number"), ("0", "--budget must be > 0")],
        "--batch": [("0", "--batch must be >= 1")],
        "--samples": [("0", "--samples must be >= 1")],
        "--seed": [("-3", "--seed must be >= 0")],
    },
    "buckets": {
        "--lengths": [
            ("@missing", "lengths file not found"),
            ("@folder", "is a folder, not a file"),
            ("@empty", "holds no lengths"),
            ("@not-json", "not JSON"),
            ("@bad-gzip", "cannot read"),
        ],
        "--micro-batch": [
            ("0", "--micro-batch must be >= 1"),
            ("100000", "20,000 lengths do not fill one optimizer step"),
        ],
        "--grad-accum": [("-1", "--grad-accum must be >= 1")],
        "--sweep": [("1,x", "not a comma list"), ("0", "--sweep must be >= 1")],
        "--compare": [("fairseq", "--compare 'fairseq' is not known")],
        "--config": CONFIG,
        "--attn": [("xformers", "--attn 'xformers' is not a known attention path")],
        "--seed": [("-1", "--seed must be >= 0")],
        "--ranks": [
            ("0", "--ranks must be >= 1"),
            ("x", "'x' is not a valid integer"),
            ("30000", "do not fill one optimizer step"),
        ],
        "--fit": [
            ("1e-4", "is not A,B"),
            ("a,b", "is not A,B"),
            ("1e-4,nan", "is not A,B"),
            ("-1e-4,1e-8", "--fit: step-cost term a is -0.0001"),
            ("0,0", "--fit: step-cost terms a and b are both 0"),
        ],
    },
    "plan": {
        "--lengths": [
            ("@missing", "lengths file not found"),
            ("@folder", "is a folder, not a file"),
            ("@empty", "holds no lengths"),
            ("@not-json", "not JSON"),
            ("@bad-gzip", "cannot read"),
        ],
        "--micro-batch": [("0", "--micro-batch must be >= 1"), ("two", "'two' is not a valid integer")],
        "--grad-accum": [("-1", "--grad-accum must be >= 1")],
        "--ranks": [("0", "--ranks must be >= 1"), ("30000", "do not fill one optimizer step")],
        "--epochs": [("0", "--epochs must be > 0"), ("nan", "--epochs must be a finite number")],
        "--fit": [("1e-4", "is not A,B"), ("-1e-4,1e-8", "--fit: step-cost term a is -0.0001")],
        "--points": [
            ("@missing", "points file not found"),
            ("@not-json", "missing column"),
            ("@empty", "missing column width, seconds (header: none)"),
            ("@narrow-points", "the fit needs at least 4x"),
        ],
        "--config": CONFIG,
        "--attn": [("xformers", "--attn 'xformers' is not known")],
        "--mode": [("bogus", "--mode 'bogus' is not known")],
        "--probe-budget": [("0", "--probe-budget must be > 0"), ("inf", "--probe-budget must be a finite")],
        "--sampler": [("ours,fast", "--sampler 'fast' is not known"), ("", "--sampler is empty")],
        "--step-overhead": [("-1", "--step-overhead must be >= 0")],
        "--gpu-hour-cost": [
            ("-2", "--gpu-hour-cost must be >= 0"),
            ("nan", "--gpu-hour-cost must be a finite"),
        ],
        "--seed": [("-1", "--seed must be >= 0")],
    },
    "gate": {
        "--base": ARM_FILES,
        "--tuned": [
            *ARM_FILES,
            ("@arm", "the tuned arm's"),
            ("@arm-copy", "holds the same bytes as the base arm's"),
        ],
        "--attractors": [("@missing", "cannot read the attractor list"), ("@empty", "attractor list")],
        "--corpus": [
            ("@missing", "corpus file not found"),
            ("@folder", "is a folder, not a file"),
            ("@empty", "the corpus holds no text"),
            ("@bad-utf8", "invalid UTF-8"),
        ],
        "--k": [("2", "--k must be >= 4"), ("x", "not a valid integer")],
        "--tokenizer": [("@missing", "tokenizer folder not found"), ("@folder", "holds no tokenizer files")],
        "--probes": [
            ("@missing", "cannot read the probes file"),
            ("@no-hypothesis", "has no hypothesis"),
            ("@not-json", "not valid TOML"),
        ],
        "--spec": [("@not-json", "not valid TOML"), ("@bad-spec", "floor_k must be > 0")],
        "--embedder": [("@missing", "embedder folder not found"), ("@folder", "cannot load the embedder")],
        "--floor": [
            ("diversity", "is not METRIC=VALUE"),
            ("diversity=nan", "is not METRIC=VALUE"),
            ("diversity=-1", "is not METRIC=VALUE"),
            ("bogus=1", "--floor bogus=... names no metric"),
        ],
        "--floor-k": [("0", "--floor-k must be > 0"), ("nan", "--floor-k must be a finite number")],
        "--out": OUT_FILE,
    },
    "generate": {
        "--model": [("@missing", "model folder not found"), ("@folder", "holds no config.json")],
        "--adapter": [("@folder", "holds no adapter_config.json")],
        "--prompts": [
            ("@missing", "prompts file not found"),
            ("@empty", "holds no prompts"),
            ("@not-json", "not JSON"),
            ("@bad-utf8", "invalid UTF-8"),
        ],
        "--runs": [("0", "--runs must be >= 1")],
        "--samples": [("0", "--samples must be >= 1"), ("x", "not a valid integer")],
        "--max-new-tokens": [("0", "--max-new-tokens must be >= 1")],
        "--temperature": [
            ("nan", "--temperature must be a finite number"),
            ("-1", "--temperature must be >= 0"),
        ],
        "--top-p": [("0", "--top-p must be > 0"), ("1.5", "--top-p must be <= 1")],
        "--batch-size": [("0", "--batch-size must be >= 1")],
        "--seed": [("-1", "--seed must be >= 0")],
        "--out": OUT_FILE,
    },
}

SHIP_MODEL = [
    ("@missing", "is not a folder"),
    ("@folder", "holds no .safetensors file"),
    ("@pickle-model", "pickle"),
    ("@corrupt-model", "not a valid safetensors file"),
    ("@file", "is not a folder"),
]
BAD["preflight"] = {
    "run_file": [
        ("@missing", "run config not found"),
        ("@folder", "is a folder, not a file"),
        ("@not-json", "not a YAML or TOML file"),
        ("@bad-yaml.yml", "line 3, column 1: not valid YAML"),
        ("@quoted.yml", "sequence_len is the string '500_000', not a whole number"),
        ("@conflict.yml", "conflicting attention options flash_attention: true and sdp_attention: true"),
        ("@long.yml", "sequence_len 100000 exceeds the model's max_position_embeddings 4096"),
        ("@uncached.yml", "holds no models--nobody--no-such-model"),
    ],
    "--gpu": [("Voodoo 5", "unknown GPU 'Voodoo 5' (--gpu)")],
    "--fit": [("1e-4", "is not A,B"), ("-1e-4,1e-8", "--fit: step-cost term a is -0.0001")],
}
BAD["tokens"] = {
    "source": [
        ("@missing", "dataset"),
        ("@folder", "is a folder, not one saved with datasets' save_to_disk"),
        ("@not-json", "not a JSONL, JSON or Parquet file"),
        ("@empty.jsonl|--tokenizer|@tok", "holds no rows"),
        ("@broken.jsonl|--tokenizer|@tok", "line 2: not JSON"),
        ("@bad-chat.jsonl|--tokenizer|@tok", "row 2: 'messages' is str, not a list of turns"),
        ("@chats.jsonl", "a dataset needs its --tokenizer"),
        ("@bad-yaml.yml", "line 3, column 1: not valid YAML"),
        ("@run.yml", "the tiny demo model has no tokenizer folder"),
        ("@uncached.yml", "holds no models--nobody--no-such-model"),
    ],
    "--tokenizer": [("@missing", "is not a folder"), ("@folder", "holds no tokenizer.json")],
    "--trainer": [("deepspeed", "is not one of")],
    "--max-length": [("0", "--max-length is 0"), ("x", "not a valid integer")],
    "--truncation-mode": [("middle", "is not one of")],
    "--completion-only-loss": [("maybe", "is not one of")],
    "--packing": [("wrapped", "is not one of")],
    "--text-field": [("", "--text-field is empty")],
    "--roles-to-train": [("", "an empty role name"), ("assistant,,user", "an empty role name")],
    "--train-on-eos": [("always", "is not one of"), ("all", "--train-on-eos is an option of Axolotl")],
    "--dataset-type": [("alpaca", "is not one of"), ("completion", "--dataset-type is an option of Axolotl")],
    "--field-messages": [
        ("", "--field-messages is empty"),
        ("turns", "--field-messages is an option of Axolotl"),
    ],
    "--limit": [("0", "--limit is 0"), ("x", "not a valid integer")],
}
BAD["fingerprint"] = {
    "model_dir": SHIP_MODEL,
    "--out": [*OUT_FILE, ("@model/model.safetensors", "never overwritten"), ("@file", "never overwritten")],
    "--compare": [
        ("@missing|@model", "is not a folder"),
        ("@bad-fingerprint.json|@model", "is not a tuneproof fingerprint"),
        ("@model|@corrupt-model", "not a valid safetensors file"),
    ],
}
BAD["merge"] = {
    "--base": [
        ("@missing", "does not exist"),
        ("@folder", "config not found"),
        ("", "is empty: pass a path"),  # it was taken as ".", the folder the merge ran in
        ("@corrupt-model", "not a valid safetensors file"),
        ("@pickle-model", "pickle"),
        ("@quantised-model", "the base is quantised"),
    ],
    "--adapter": [
        ("@missing", "is not a folder"),
        ("@folder", "has no adapter_config.json"),
        ("@pickle-adapter", "pickle"),
        ("@other-adapter", "does not fit"),
    ],
    "--out": [
        ("@file", "already exists"),
        ("@under-a-file", "is not a folder"),
        ("@model/merged", "is inside the input"),
        ("/proc/tuneproof-out", "cannot create a folder in /proc"),
        ("@missing/deeper", "does not exist"),
    ],
    "--dtype": [("int8", "'int8' is not one of")],
}
BAD["quant-audit"] = {
    "--recipe": [
        ("@missing", "cannot read recipe"),
        ("@folder", "cannot read recipe"),
        ("@not-json", "neither YAML, Python nor JSON"),
        ("@no-modifier.yaml", "no quantising modifier"),
    ],
    "--config": [
        ("@missing", "does not exist"),
        ("@not-json", "not valid JSON"),
        ("@no-model-type.json", "has no model_type"),
        ("@nan-field", "rms_norm_eps is nan"),
        ("@string-size", "hidden_size is 'abc'"),
        ("@fp8-config.json", "describes a checkpoint already stored quantised, fp8"),
        ("@only-model-type", "holds none of"),
        ("@unknown-nan.json", "hidden_size is nan"),
    ],
    "--checkpoint": [
        ("@missing", "is not a folder"),
        ("@folder", "holds no .safetensors file"),
        ("@corrupt-model", "not a valid safetensors file"),
    ],
    "--engine": [("vllm", "--engine 'vllm' is not an engine")],
}

BAD["train"] = {
    "recipe": [
        ("@missing", "not found"),
        ("@folder", "is a folder, not a file"),
        ("@not-json", "is not TOML"),
        ("@empty", "is empty: every value would be the embedded demo's"),
        ("@lr-alias.toml", "this recipe calls it optim.lr"),
    ],
    "--output": [("@file", "is a file"), ("@model", "is not empty and holds no tuneproof run")],
    "--budget": [("0", "--budget must be > 0"), ("inf", "--budget must be a finite number")],
}

BAD["memory"] = {
    "--config": CONFIG,
    "--seq-len": [("0", "--seq-len must be >= 1"), ("x", "not a valid integer")],
    "--batch": [("0", "--batch must be >= 1")],
    "--attn": [("xformers", "--attn 'xformers' is not a known attention path")],
    "--padding-fraction": [("1", "must be < 1"), ("nan", "--padding-fraction must be a finite number")],
    "--mode": [
        ("forward", "--mode forward has no backward to size"),
        ("qlora", "--mode 'qlora' is not known"),
    ],
    "--lora-rank": [("0", "--lora-rank must be >= 1")],
    "--lora-targets": [
        ("", "--lora-targets is empty"),
        ("nope_proj", "--lora-targets 'nope_proj' matches no"),
    ],
    "--lora-target-parameters": [
        ("experts.nope", "'experts.nope' matches no fused expert parameter"),
        ("", "--lora-target-parameters '' names no parameter"),
    ],
    "--dtype": [("fp8", "--dtype 'fp8' is not known"), ("int3", "--dtype 'int3' is not known")],
    "--autocast": [("fp32", "--autocast 'fp32' is not known"), ("", "use one of: bf16, fp16, none")],
    "--quant": [("3bit", "--quant '3bit' is not known")],
    "--optimizer": [("lion", "--optimizer 'lion' is not known")],
    "--optimizer-impl": [("fast", "--optimizer-impl 'fast' is not known")],
    "--grad-accum": [("0", "--grad-accum must be >= 1"), ("1.5", "not a valid integer")],
    "--parallel": [("tp", "--parallel 'tp' is not known"), ("ddp", "--parallel and --world-size disagree")],
    "--world-size": [("0", "--world-size must be >= 1"), ("4", "--parallel and --world-size disagree")],
    "--gpu": [
        ("Voodoo", "unknown GPU 'Voodoo' (--gpu)"),
        ("A100", "the A100 ships with 40 GB or 80 GB"),
    ],
    "--gpu-memory": [("0", "--gpu-memory must be >= 0.001"), ("nan", "finite"), ("x", "not a valid float")],
}

REQUIRED = {
    "memory": ["--seq-len", "64"],
    "preflight": ["@run.yml"],
    "tokens": ["@chats.jsonl", "--tokenizer", "@tok"],
    "flops": ["--seq-len", "64"],
    "explain": ["--seq-len", "64"],
    "fit": ["--points", "@points"],
    "kernels": ["--trace", "@trace"],
    "gate": ["--base", "@arm", "--tuned", "@arm-tuned"],
    "generate": ["--model", "tiny", "--prompts", "@prompts", "--out", "@out-json"],
    "fingerprint": ["@model"],
    "merge": ["--base", "@model", "--adapter", "@adapter", "--out", "@merge-out"],
    "quant-audit": ["--recipe", "@recipe.yaml", "--config", "@model"],
}
# options that need the command's other inputs left out (they are alternatives, not companions)
REQUIRED_FOR = {
    ("preflight", "run_file"): [],
    ("tokens", "source"): [],
    ("fingerprint", "model_dir"): [],
    ("fingerprint", "--compare"): [],
    ("quant-audit", "--checkpoint"): [],
    ("plan", "--points"): ["--sampler", "ours"],
    **{
        ("plan", o): ["--probe", "--sampler", "ours", "--probe-budget", "1"]
        for o in ("--config", "--attn", "--mode")
    },
    ("plan", "--probe-budget"): ["--probe"],
}
# cheap, valid companions so that each command stops at the bad value, never later
QUICK = {
    "probe": ["--widths", "64,128,256", "--mode", "forward", "--budget", "1"],
    "doctor": ["--probe-budget", "1"],
    "adjudicate": ["--widths", "64"],
    "buckets": ["--sweep", "", "--compare", ""],
    "gate": ["--corpus", "@corpus"],
    "plan": ["--fit", "1e-4,1e-8", "--sampler", "ours"],
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    (d / "folder").mkdir()
    (d / "not-json").write_text("{not json, width;seconds\nabc\n")
    (d / "empty").write_text("")
    sizes = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 256}  # fmt: skip
    fp8 = {"model_type": "llama", **sizes, "quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}}
    (d / "fp8-config.json").write_text(json.dumps(fp8))
    (d / "twin-traces").mkdir()
    for name in ("a.json", "b.json"):  # one trace copied under two names, in a folder of "ranks"
        (d / "twin-traces" / name).write_text(
            json.dumps({"traceEvents": [{"ph": "X", "name": "k", "ts": 0, "dur": 1}]})
        )
    (d / "falling.csv").write_text("width,seconds\n512,3.0\n1024,2.0\n2048,1.0\n4096,0.5\n")
    (d / "only-model-type").write_text(json.dumps({"model_type": "llama"}))
    (d / "nan-field").write_text('{"model_type": "llama", "hidden_size": 64, "rms_norm_eps": NaN}')
    (d / "string-size").write_text(json.dumps({"model_type": "llama", "hidden_size": "abc"}))
    kv_heads = {"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 64}
    (d / "kv-heads").write_text(json.dumps(kv_heads))
    (d / "layers-1e9").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 10**9}))
    (d / "bad-gzip").write_bytes(gzip.compress(b"x" * 100)[:20])
    (d / "no-events").write_text(json.dumps({"events": []}))
    (d / "lr-alias.toml").write_text("[optim]\nlearning_rate = 1e-4\n")
    (d / "nan-duration").write_text('{"traceEvents": [{"ph": "X", "name": "k", "ts": 0, "dur": NaN}]}')
    (d / "file").write_text("keep me")
    (d / "narrow-points").write_text("width,seconds\n" + "".join(f"{w},{w / 1000}\n" for w in (64, 96, 128)))
    (d / "points").write_text(
        "width,seconds\n" + "".join(f"{w},{w / 1000}\n" for w in (64, 128, 256) for _ in range(6))
    )
    (d / "trace").write_text(
        json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 5}]})
    )
    arm = "".join(
        json.dumps({"prompt_id": f"p{i}", "run": r, "sample": s, "text": f"words {i} {r} {s} and more"})
        + "\n"
        for i in range(4)
        for r in range(2)
        for s in range(2)
    )
    (d / "arm").write_text(arm)
    (d / "arm-tuned").write_text(arm.replace("and more", "and more tuned"))
    (d / "arm-copy").write_text(arm)
    (d / "arm-1run").write_text("".join(x + "\n" for x in arm.splitlines() if '"run": 0' in x))
    (d / "arm-no-text").write_text('{"prompt_id": "p", "run": 0, "sample": 0}\n')
    (d / "bad-utf8").write_bytes(b'{"prompt_id": "p", "run": 0, "sample": 0, "text": "\xff"}\n')
    (d / "bad-gzip-arm.jsonl.gz").write_bytes(gzip.compress(arm.encode())[:40])
    (d / "no-hypothesis").write_text(
        '[[probe]]\nname = "p"\nexpect = "increase"\nprompts = "*"\nregex = ["x"]\n'
    )
    (d / "bad-spec").write_text("floor_k = 0\n")
    (d / "corpus").write_text("some licensed prose " * 20)
    (d / "prompts").write_text('{"prompt_id": "a", "prompt": "hi"}\n')
    _ship_files(d)
    _token_files(d)
    paths = {f"@{p.name}": str(p) for p in d.iterdir()}
    paths["@bad-gzip-arm"] = str(d / "bad-gzip-arm.jsonl.gz")
    paths["@out-json"] = str(d / "out" / "arm.jsonl")
    paths["@missing"] = str(d / "missing.json")
    paths["@under-a-file"] = str(d / "file" / "sub")
    paths["@proc"] = "/proc/tuneproof-out"
    paths["@merge-out"] = str(d / "merged")
    return paths


def _ship_files(d: Path) -> None:
    """Model folders and adapters for fingerprint, merge and quant-audit."""
    import ship_fakes as fx

    fx.save(fx.model("llama"), d / "model")
    fx.adapter(fx.model("llama"), d / "adapter")
    fx.adapter(fx.model("qwen3"), d / "other-adapter")
    fx.adapter(fx.model("llama"), d / "pickle-adapter")
    (d / "pickle-adapter" / "adapter_model.safetensors").rename(d / "pickle-adapter" / "adapter_model.bin")
    for name in ("corrupt-model", "pickle-model", "quantised-model"):
        fx.save(fx.model("llama"), d / name)
    weights = d / "corrupt-model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    (d / "pickle-model" / "model.safetensors").rename(d / "pickle-model" / "pytorch_model.bin")
    config = json.loads((d / "quantised-model" / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes"}
    (d / "quantised-model" / "config.json").write_text(json.dumps(config))
    (d / "bad-fingerprint.json").write_text(json.dumps({"format": "other"}))
    (d / "run.yml").write_text("base_model: tiny\nsequence_len: 64\n")
    (d / "bad-yaml.yml").write_text("base_model: tiny\nsequence_len: [64\n")
    (d / "quoted.yml").write_text('base_model: tiny\nsequence_len: "500_000"\n')
    (d / "conflict.yml").write_text("base_model: tiny\nflash_attention: true\nsdp_attention: true\n")
    (d / "long.yml").write_text("base_model: tiny\nsequence_len: 100000\n")
    (d / "uncached.yml").write_text("base_model: nobody/no-such-model\n")
    (d / "recipe.yaml").write_text("s:\n  m:\n    QuantizationModifier: {targets: Linear, scheme: NVFP4}\n")
    (d / "no-modifier.yaml").write_text("s: {m: {AWQModifier: {}}}\n")
    (d / "no-model-type.json").write_text(json.dumps({"hidden_size": 8}))
    (d / "unknown-nan.json").write_text('{"model_type": "deepseek_v3", "hidden_size": NaN}')


def _token_files(d: Path) -> None:
    """A tokenizer folder and chat datasets for tokens."""
    import tiny_tokenizers as tt

    tt.save(tt.tokenizer("chatml", True), d / "tok")
    tt.write_jsonl(tt.chats(4), d / "chats.jsonl")
    (d / "empty.jsonl").write_text("")
    (d / "broken.jsonl").write_text('{"text": "w1"}\n{not json\n')
    good = json.dumps(tt.chats(1)[0])
    (d / "bad-chat.jsonl").write_text(f'{good}\n{{"messages": "not a list of turns"}}\n')


def _argv(value: str) -> list[str]:
    """`a|b` is two command-line words (an option taking two values)."""
    return value.split("|")


def _cases() -> list[tuple[str, str, str, str]]:
    return [
        (cmd, opt, value, frag)
        for cmd, opts in BAD.items()
        for opt, bad in opts.items()
        for value, frag in bad
    ]


@pytest.mark.parametrize("cmd,opt,value,fragment", _cases(), ids=lambda x: str(x)[:30])
def test_bad_value_is_one_line_exit_2(
    capsys, files: dict[str, str], cmd: str, opt: str, value: str, fragment: str
) -> None:
    def real(v: str) -> str:
        head, sep, tail = v.partition("/")
        if head in files and sep:
            return f"{files[head]}/{tail}"
        return files.get(v, v)

    companions = REQUIRED_FOR.get((cmd, opt), REQUIRED.get(cmd, []) + QUICK.get(cmd, []))
    base = [real(v) for v in companions]
    # the option under test wins over a companion of the same name
    if opt in base:
        i = base.index(opt)
        del base[i : i + 2]
    before = {p: Path(p).read_bytes() for p in files.values() if Path(p).is_file()}
    given = [real(v) for v in _argv(value)]
    code = main([cmd, *base, *([] if not opt.startswith("-") else [opt]), *given])
    out, err = capsys.readouterr()
    assert code == 2, (cmd, opt, value, out[-300:], err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and fragment in err, err
    assert {p: Path(p).read_bytes() for p in before} == before  # nothing the user had is modified


def test_every_option_has_bad_values() -> None:
    import click

    for name, command in app.commands.items():
        if isinstance(command, click.Group):
            continue  # subcommands are tested on their own (tests/gate/test_gate.py: attractors mine)
        # options and positional arguments (an argument's opts is its name, e.g. model_dir)
        options = {o for p in command.params for o in p.opts if not getattr(p, "is_flag", False)}
        options -= {"--help"}
        assert options == set(BAD.get(name, {})), name


def test_flags_that_contradict_each_other(capsys) -> None:
    assert main(["explain", "--seq-len", "8", "--padded", "--packed"]) == 2
    assert "--padded and --packed together" in capsys.readouterr().err
    assert main(["flops", "--seq-len", "8", "--mode", "forward", "--grad-ckpt"]) == 2
    assert "--grad-ckpt needs a backward pass" in capsys.readouterr().err
