"""The streaming trace reader (trace/read.py) and the trace's own device (trace/devices.py)
on public traces from real jobs: HolisticTraceAnalysis's AMD MI250, CPU-only, nanosecond-resolution
and two-rank test traces, Kineto's old-format trace and the DeepSeek-V3 training rank (provenance in
tests/data/README.md). The reference each is checked against is the whole document read with
json.loads, filtered here by the rule the reader documents."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tuneproof.cli.app import main
from tuneproof.commands import kernels as area
from tuneproof.core.errors import TuneproofError
from tuneproof.measure.kernels import kernel_table
from tuneproof.trace import read as trace_read
from tuneproof.trace.read import Trace, load_trace

DATA = Path(__file__).parent.parent / "data"
HTA = DATA / "hta"
FIXTURES = [
    DATA / "deepseek_v3_train_h800.json.gz",
    HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    HTA / "cpu_only_rank-34.json.gz",
    HTA / "ns_resolution_rank-0.json.gz",
    HTA / "sampled_rank-0.json.gz",
    HTA / "sampled_rank-1.json.gz",
    DATA / "kineto" / "gpu_metrics_input.json.gz",
    DATA / "cpu_tiny_sdpa.json.gz",
    DATA / "case_sm120.json.gz",
]
OLD = {"memcpy": "gpu_memcpy", "memset": "gpu_memset", "runtime": "cuda_runtime", "operator": "cpu_op"}


def _whole(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return {"traceEvents": data} if isinstance(data, list) else data


def _rows(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or "dur" not in e:
            continue
        cat = str(e.get("cat", "")).lower()
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        where = (e.get("pid"), e.get("tid"), args.get("stream"), args.get("device"))
        out.append((OLD.get(cat, cat), e["name"], e["ts"], e["dur"], *where))
    device = [r for r in out if r[0] in {"kernel", "gpu_memcpy", "gpu_memset"}]
    return device or [r for r in out if r[0] == "cpu_op"]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
@pytest.mark.parametrize("chunk", [5_000, 1 << 16, trace_read.CHUNK])
def test_streaming_keeps_the_events_and_metadata_of_the_whole_file(
    monkeypatch: pytest.MonkeyPatch, path: Path, chunk: int
) -> None:
    monkeypatch.setattr(trace_read, "CHUNK", chunk)  # chunk boundaries land inside events and keys
    whole, streamed = _whole(path), load_trace(path)
    assert _rows(streamed.events) == _rows(whole["traceEvents"])
    assert streamed.meta == {k: v for k, v in whole.items() if k != "traceEvents"}
    assert streamed.read_events == len(whole["traceEvents"])


@pytest.mark.parametrize("path", [p for p in FIXTURES if "kineto" not in p.parts], ids=lambda p: p.name)
def test_the_kernel_table_is_the_whole_file_readers(path: Path) -> None:
    assert kernel_table(load_trace(path)).to_dict() == kernel_table(_whole(path)).to_dict()


def _one(path: Path) -> area.KernelTable:
    table = area.run(area.prepare(area.KernelsSpec(trace=path)))
    assert isinstance(table, area.KernelTable)
    return table


def test_amd_mi250_is_rocm_not_a_cuda_capability(capsys: pytest.CaptureFixture[str]) -> None:
    t = _one(HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    dev = t.device or {}
    # deviceProperties says "AMD Radeon Graphics", computeMajor 9, warpSize 64, no gcnArchName
    assert dev["platform"] == "rocm" and dev["arch"] is None and "computeMajor" not in dev
    assert dev["hip_version_major_minor"] == "9.0" and "gfx9 family" in dev["description"]
    assert dev["limits"]["warpSize"] == 64 and dev["limits"]["numSms"] == 104
    assert t.arch_mismatch == []
    assert main(["kernels", "--trace", str(HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "compute capability" not in out and "ROCm" in out


def test_a_gcn_arch_name_is_the_rocm_arch() -> None:
    from tuneproof.trace.devices import device_info

    props = [{"id": 0, "name": "AMD Instinct MI300X", "computeMajor": 9, "computeMinor": 4,
              "gcnArchName": "gfx942:sramecc+:xnack-"}]  # fmt: skip
    dev = device_info(Trace.of({"deviceProperties": props}), "device")
    assert dev["platform"] == "rocm" and dev["arch"] == "gfx942" and "gfx942" in dev["description"]


def test_cuda_device_limits_come_from_the_trace() -> None:
    t = _one(DATA / "deepseek_v3_train_h800.json.gz")
    dev = t.device or {}
    assert dev["platform"] == "cuda" and dev["arch"] == "sm90" and dev["name"] == "NVIDIA H800"
    assert (dev["computeMajor"], dev["computeMinor"]) == (9, 0)
    assert dev["limits"]["numSms"] == 132 and dev["limits"]["totalGlobalMem"] == 84943110144
    assert dev["limits"]["sharedMemPerBlockOptin"] == 232448


def test_cpu_only_trace() -> None:
    t = _one(HTA / "cpu_only_rank-34.json.gz")
    assert t.source == "cpu_ops" and t.rank == "34"
    assert (t.device or {})["platform"] == "cpu" and "CPU only" in (t.device or {})["description"]


def test_ns_display_unit_keeps_microseconds() -> None:
    path = HTA / "ns_resolution_rank-0.json.gz"
    trace = load_trace(path)
    assert trace.meta["displayTimeUnit"] == "ns"
    first = trace.events[0]
    # ts and dur stay microseconds with ns decimals (PyTorch #122425): 4.928 us, not 4.928 ns
    assert first["cat"] == "kernel" and first["dur"] == 4.928 and first["args"] == {"stream": 7, "device": 0}
    t = _one(path)
    assert (t.device or {})["description"] == "Tesla V100-SXM2-32GB (compute capability 7.0)"
    assert t.total_ms == pytest.approx(sum(e["dur"] for e in trace.events) / 1e3)


def test_old_kineto_format() -> None:
    path = DATA / "kineto" / "gpu_metrics_input.json.gz"
    trace = load_trace(path)
    cats = {e["cat"] for e in trace.events}
    assert cats == {"kernel", "gpu_memcpy"}  # "Kernel" and "Memcpy" under today's names
    t = _one(path)
    assert t.source == "device" and t.ms["memory"] > 0  # the two Memcpy rows
    dev = t.device or {}  # computeProperties with major/minor/multiProcessorCount
    assert dev["description"] == "Tesla V100-DGXS-32GB (compute capability 7.0)"
    assert dev["limits"]["numSms"] == 80 and dev["limits"]["sharedMemPerBlockOptin"] == 98304


def test_old_category_names_memset_and_operator(tmp_path: Path) -> None:
    p = tmp_path / "old.json"
    ops = [{"ph": "X", "cat": "Operator", "name": "aten::mm", "ts": 0, "dur": 5}]
    p.write_text(json.dumps({"traceEvents": ops}))
    assert kernel_table(load_trace(p)).source == "cpu_ops"
    p.write_text(json.dumps({"traceEvents": [*ops, {"ph": "X", "cat": "Memset", "name": "Memset (Device)",
                                                    "ts": 1, "dur": 2}]}))  # fmt: skip
    t = kernel_table(load_trace(p))
    assert t.source == "device" and t.ms == {"memory": pytest.approx(0.002)}


def test_two_rank_files_and_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]
    result = area.run(area.prepare(area.KernelsSpec(trace=files[0], more=(files[1],))))
    assert isinstance(result, area.RankTables) and [t.rank for t in result.tables] == ["0", "1"]
    for f in files:
        shutil.copy(f, tmp_path / f.name)
    folder = area.run(area.prepare(area.KernelsSpec(trace=tmp_path)))
    assert isinstance(folder, area.RankTables)
    assert [t.to_dict() for t in folder.tables] == [t.to_dict() for t in result.tables]
    assert main(["kernels", "--trace", str(files[0]), "--trace", str(files[1]), "--json"]) == 0
    assert [r["rank"] for r in json.loads(capsys.readouterr().out)["ranks"]] == ["0", "1"]


def test_rank_from_the_file_name_without_distributed_info(tmp_path: Path) -> None:
    p = tmp_path / "rank-3.Jul_15.pt.trace.json.gz"
    shutil.copy(HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz", p)  # no distributedInfo
    assert _one(p).rank == "3"


def test_empty_folder_refused(tmp_path: Path) -> None:
    with pytest.raises(TuneproofError, match=r"holds no \.json or \.gz trace"):
        area.prepare(area.KernelsSpec(trace=tmp_path))


def test_truncated_gzip_and_json_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = (DATA / "deepseek_v3_train_h800.json.gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TuneproofError, match="is not a readable JSON trace"):
        load_trace(cut)
    text = tmp_path / "cut.json"
    text.write_bytes(gzip.decompress(raw)[:1_000_000])
    assert main(["kernels", "--trace", str(text)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is not a readable JSON trace" in err and err.count("\n") == 1


@pytest.mark.parametrize("bad", [-1.0, "12", None, float("nan")])
def test_malformed_event_refused_with_its_index(tmp_path: Path, bad: Any) -> None:
    trace = _whole(DATA / "deepseek_v3_train_h800.json.gz")
    i = next(i for i, e in enumerate(trace["traceEvents"]) if e.get("cat") == "kernel" and i > 5000)
    trace["traceEvents"][i]["dur"] = bad
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(trace))
    with pytest.raises(TuneproofError, match=f"trace event {i} is malformed"):
        load_trace(p)


def test_reader_keeps_only_compact_events() -> None:
    trace = load_trace(DATA / "deepseek_v3_train_h800.json.gz")
    keys = {k for e in trace.events for k in e}
    assert keys <= {"ph", "cat", "name", "ts", "dur", "pid", "tid", "args"}
    assert {k for e in trace.events for k in e.get("args", {})} == {"stream", "device"}
    assert (trace.read_events, trace.runtime, trace.source) == (
        14240,
        "cuda",
        str(DATA / "deepseek_v3_train_h800.json.gz"),
    )


def test_one_rank_twice_or_mixed_devices_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """A skew across runs means nothing: the same file twice, two rank-0 files of different runs, or a
    CUDA and a ROCm trace are refused before any table, naming both files."""
    r0, mi250 = HTA / "sampled_rank-0.json.gz", HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    assert main(["kernels", "--trace", str(r0), "--trace", str(r0)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{r0} is the same file as {r0}: one trace given twice" in err
    assert main(["kernels", "--trace", str(HTA / "ns_resolution_rank-0.json.gz"), "--trace", str(r0)]) == 2
    assert "are both rank 0" in capsys.readouterr().err
    assert main(["kernels", "--trace", str(r0), "--trace", str(mi250)]) == 2
    err = capsys.readouterr().err
    assert "ran on different devices" in err and "cuda" in err and "rocm" in err and str(mi250) in err


def test_kernels_without_device_properties_are_not_cpu_only() -> None:
    """HTA's sampled ranks have CUDA kernels on streams and cudaLaunchKernel rows but no
    deviceProperties: a CUDA device whose properties the trace does not record."""
    dev = _one(HTA / "sampled_rank-0.json.gz").device or {}
    assert (
        dev["platform"] == "cuda"
        and dev["description"] == "CUDA device, properties not recorded in the trace"
    )


def test_each_trace_is_read_once_and_handed_on(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """One `Trace` per file, read once: the kernels command over two ranks reads two files twice in
    all (the table, the device and the rank come from the same Trace), explain --trace reads one once."""
    seen: list[str] = []
    read = trace_read.read_trace

    def counted(p: Path) -> trace_read.Trace:
        seen.append(Path(p).name)
        return read(p)

    monkeypatch.setattr(trace_read, "read_trace", counted)
    ranks = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]
    assert main(["kernels", "--json", "--trace", str(ranks[0]), "--trace", str(ranks[1])]) == 0
    assert seen == [p.name for p in ranks]
    seen.clear()
    h800 = DATA / "deepseek_v3_train_h800.json.gz"
    assert main(["explain", "--json", "--config", "tiny", "--seq-len", "1024", "--trace", str(h800)]) == 0
    assert seen == [h800.name]
    capsys.readouterr()
