"""Property-based fuzzing of every reader of user files: whatever the bytes, the answer is a result or
a TuneproofError (one line for the CLI), never another exception."""

from __future__ import annotations

import gzip
import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tuneproof.arch import resolve
from tuneproof.core.errors import TuneproofError
from tuneproof.data.lengths import read_lengths
from tuneproof.measure.fit import fit_scaling, read_points
from tuneproof.measure.kernels import kernel_table
from tuneproof.trace.read import load_trace

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)

pytestmark = pytest.mark.slow  # hypothesis runs: left out of mutation runs
SIZE_KEYS = [
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "head_dim",
    "sliding_window",
    "num_experts",
    "num_experts_per_tok",
    "layer_types",
    "max_position_embeddings",
    "text_config",
]
MODEL_TYPES = ["llama", "gemma4_text", "gemma3", "mixtral", "qwen3_moe", "gpt_oss", "bert", "", 3]


def _refused_or_ok(fn, *args) -> None:  # type: ignore[no-untyped-def]
    try:
        fn(*args)
    except TuneproofError as e:
        assert e.message and "\n" not in e.message.strip()


def _file_refused_or_ok(fn, data: bytes, name: str) -> None:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / name
        p.write_bytes(data)
        _refused_or_ok(fn, p)


@SETTINGS
@given(
    model_type=st.sampled_from(MODEL_TYPES),
    fields=st.dictionaries(st.sampled_from(SIZE_KEYS), json_values, max_size=6),
    base=st.booleans(),
)
def test_config_dicts(model_type: object, fields: dict, base: bool) -> None:
    cfg = {"model_type": model_type, **fields}
    if base:  # a mostly valid tiny model with fuzzed fields on top
        cfg = {
            "model_type": "llama",
            "hidden_size": 32,
            "intermediate_size": 48,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "vocab_size": 64,
            **fields,
        }
    _refused_or_ok(resolve, cfg)


@SETTINGS
@given(raw=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_config_files(raw: bytes) -> None:
    _file_refused_or_ok(resolve, raw, "config.json")


events = st.dictionaries(
    st.sampled_from(["ph", "name", "ts", "dur", "cat", "pid", "tid"]),
    st.one_of(st.sampled_from(["X", "kernel", "cpu_op", "aten::mm", "fmha_sm80"]), scalars),
    max_size=7,
)


@SETTINGS
@given(
    trace=st.one_of(
        st.dictionaries(
            st.sampled_from(["traceEvents", "deviceProperties"]), st.lists(events, max_size=6), max_size=2
        ),
        st.lists(events, max_size=6),
        json_values,
    ),
    gz=st.booleans(),
)
def test_traces(trace: object, gz: bool) -> None:
    raw = json.dumps(trace).encode()

    def read(path: Path) -> None:
        table = kernel_table(load_trace(path))
        assert all(math.isfinite(v) for v in table.ms.values())

    _file_refused_or_ok(read, gzip.compress(raw) if gz else raw, "trace.json.gz" if gz else "trace.json")


@SETTINGS
@given(raw=st.binary(max_size=200))
def test_trace_bytes(raw: bytes) -> None:
    _file_refused_or_ok(lambda p: kernel_table(load_trace(p)), raw, "trace.json.gz")


cells = st.one_of(st.integers(-5, 5000).map(str), st.floats(allow_nan=True).map(str), st.text(max_size=5))


@SETTINGS
@given(
    header=st.sampled_from(["width,seconds", "seconds,width", "width,seconds,extra", "w,s", ""]),
    rows=st.lists(st.lists(cells, min_size=0, max_size=3), max_size=20),
)
def test_points_csv(header: str, rows: list[list[str]]) -> None:
    text = header + "\n" + "\n".join(",".join(r) for r in rows)

    def read_and_fit(p: Path) -> None:
        w, t = read_points(p)
        fit_scaling(w, t)

    _file_refused_or_ok(read_and_fit, text.encode(), "points.csv")


@SETTINGS
@given(raw=st.binary(max_size=200))
def test_points_bytes(raw: bytes) -> None:
    _file_refused_or_ok(read_points, raw, "points.csv")


lines = st.one_of(
    st.integers(-3, 10**12).map(str),
    st.builds(lambda n, r: json.dumps({"length": n, "root": r}), json_values, json_values),
    st.builds(lambda n: json.dumps({"length": n}), json_values),
    st.text(max_size=10),
)


@SETTINGS
@given(rows=st.lists(lines, max_size=12), gz=st.booleans())
def test_lengths_files(rows: list[str], gz: bool) -> None:
    raw = "\n".join(rows).encode()
    _file_refused_or_ok(
        read_lengths, gzip.compress(raw) if gz else raw, "lengths.txt.gz" if gz else "lengths.txt"
    )


@SETTINGS
@given(raw=st.binary(max_size=200))
def test_lengths_bytes(raw: bytes) -> None:
    _file_refused_or_ok(read_lengths, raw, "lengths.gz")


arm_rows = st.dictionaries(
    st.sampled_from(["prompt_id", "run", "sample", "text", "doc_id", "resps", "filtered_resps"]),
    json_values,
    max_size=7,
)


@SETTINGS
@given(rows=st.lists(arm_rows | json_values, max_size=8), gz=st.booleans(), lm_eval=st.booleans())
def test_arm_files(rows: list[object], gz: bool, lm_eval: bool) -> None:
    from tuneproof.gate.arms import read_arm

    raw = "\n".join(json.dumps(r) for r in rows).encode()
    name = ("samples_task_2026-01-01T00-00-00" if lm_eval else "arm") + (".jsonl.gz" if gz else ".jsonl")
    _file_refused_or_ok(lambda p: read_arm([p], "base"), gzip.compress(raw) if gz else raw, name)


@SETTINGS
@given(raw=st.binary(max_size=300))
def test_arm_prompt_probe_spec_and_corpus_bytes(raw: bytes) -> None:
    from tuneproof.gate.arms import read_arm
    from tuneproof.gate.generate import read_prompts
    from tuneproof.gate.memorise import build_index
    from tuneproof.gate.probes import read_probes
    from tuneproof.gate.spec import read_spec

    _file_refused_or_ok(lambda p: read_arm([p], "base"), raw, "arm.jsonl")
    _file_refused_or_ok(read_prompts, raw, "prompts.jsonl")
    _file_refused_or_ok(read_probes, raw, "probes.toml")
    _file_refused_or_ok(read_spec, raw, "spec.toml")
    _file_refused_or_ok(lambda p: build_index([p], k=4, use_cache=False), raw, "corpus.jsonl")
    _file_refused_or_ok(lambda p: build_index([p], k=4, use_cache=False), raw, "corpus.txt.gz")


probe_tables = st.dictionaries(
    st.sampled_from(["name", "hypothesis", "expect", "prompts", "regex", "phrases"]),
    st.one_of(json_values, st.sampled_from(["increase", "no-change", "*", ["(", "a+"], ["x"]])),
    max_size=6,
)


@SETTINGS
@given(tables=st.lists(probe_tables, max_size=3))
def test_probe_files(tables: list[dict]) -> None:
    from tuneproof.gate.probes import read_probes

    def toml_value(v: object) -> str:
        return json.dumps(v) if not isinstance(v, dict) else "{}"

    text = "".join(
        "[[probe]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in t.items() if v is not None)
        for t in tables
    )
    _file_refused_or_ok(read_probes, text.encode(), "probes.toml")


spec_tables = st.fixed_dictionaries(
    {},
    optional={
        "floor_k": json_values,
        "diversity": st.dictionaries(
            st.sampled_from(["gate", "metric", "wanted", "x"]), json_values, max_size=3
        ),
        "attractors": st.dictionaries(st.sampled_from(["gate", "metric", "wanted"]), json_values, max_size=3),
        "memorisation": st.dictionaries(st.sampled_from(["gate", "threshold", "k"]), json_values, max_size=3),
    },
)


@SETTINGS
@given(spec=spec_tables)
def test_spec_files(spec: dict) -> None:
    from tuneproof.gate.spec import read_spec

    def toml_value(v: object) -> str:
        return json.dumps(v) if not isinstance(v, dict) else "{}"

    lines = [f"floor_k = {toml_value(spec['floor_k'])}\n"] if spec.get("floor_k") is not None else []
    for table in ("diversity", "attractors", "memorisation"):
        if table in spec:
            lines.append(f"[{table}]\n")
            lines += [f"{k} = {toml_value(v)}\n" for k, v in spec[table].items() if v is not None]
    _file_refused_or_ok(read_spec, "".join(lines).encode(), "spec.toml")


bench_rows = st.dictionaries(
    st.sampled_from(["doc_id", "filter", "metrics", "acc", "exact_match", "doc_hash", "resps", "id", "task"]),
    json_values,
    max_size=7,
)


@SETTINGS
@given(rows=st.lists(bench_rows | json_values, max_size=8), results=json_values, kind=st.integers(0, 2))
@example(rows=[{"metrics": [[]], "doc_id": 0}], results=None, kind=1)  # a list as a metric name: a traceback
def test_benchmark_runs(rows: list[object], results: object, kind: int) -> None:
    """lm-eval samples beside a fuzzed results file, a bare samples file, a per-example JSONL, a CSV."""
    from tuneproof.gate.arms import read_arm
    from tuneproof.gate.bench_lineup import line_up
    from tuneproof.gate.spec import GateSpec

    def both(p: Path) -> None:
        arm = read_arm([p], "base")
        line_up(list(arm.bench.values()), list(arm.bench.values()), GateSpec())

    raw = "\n".join(json.dumps(r) for r in rows).encode()
    date = "2026-01-01T00-00-00.000000"
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / "run"
        folder.mkdir()
        (folder / f"samples_task_{date}.jsonl").write_bytes(raw)
        if kind == 0:
            (folder / f"results_{date}.json").write_text(json.dumps({"results": results}))
            _refused_or_ok(both, folder)
        elif kind == 1:
            _refused_or_ok(both, folder / f"samples_task_{date}.jsonl")
        else:
            (folder / "r.jsonl").write_bytes(raw)
            _refused_or_ok(both, folder / "r.jsonl")


@SETTINGS
@given(raw=st.binary(max_size=200))
@example(raw=b"\r\x00")  # a carriage return inside a field: csv.Error, once a traceback
def test_per_example_csv_bytes(raw: bytes) -> None:
    from tuneproof.gate.arms import read_arm

    _file_refused_or_ok(lambda p: read_arm([p], "base"), b"id,acc\n" + raw, "r.csv")


device_props = st.dictionaries(
    st.sampled_from(
        [
            "id",
            "name",
            "computeMajor",
            "computeMinor",
            "sharedMemPerBlockOptin",
            "warpSize",
            "gcnArchName",
            "major",
            "minor",
        ]
    ),
    st.integers(-2, 13)
    | st.sampled_from([49_152, 101_376, 232_448, "0", "x", None, True, 9.5])
    | json_values,
    max_size=7,
)
kernel_rows = st.fixed_dictionaries(
    {
        "ph": st.just("X"),
        "cat": st.sampled_from(["kernel", "cpu_op"]),
        "name": st.just("k"),
        "ts": st.integers(0, 9),
        "dur": st.integers(1, 9),
    },
    optional={
        "args": st.dictionaries(st.just("device"), st.integers(-1, 3) | st.sampled_from(["0", None, 1.5]))
    },
)


@SETTINGS
@given(props=st.lists(device_props, max_size=3) | json_values, events=st.lists(kernel_rows, max_size=4))
def test_trace_devices(props: object, events: list[dict]) -> None:
    """`explain --trace`: the device a trace ran on, from whatever its deviceProperties hold."""
    from tuneproof.hardware.card import of_trace

    raw = json.dumps({"deviceProperties": props, "traceEvents": events}).encode()

    def read(path: Path) -> None:
        t = of_trace(load_trace(path))
        assert t.capability is not None and (t.smem_limit is None or t.smem_limit >= 49_152)

    _file_refused_or_ok(read, raw, "trace.json")
