"""The probe end to end on the embedded tiny model (CPU, small widths: fast, not a speed test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuneproof.cli.app import main
from tuneproof.errors import TuneproofError
from tuneproof.measure import probe as probe_mod
from tuneproof.measure.fit import read_points
from tuneproof.measure.kernels import kernel_table, load_trace
from tuneproof.measure.probe import ProbeSpec, run_probe


def test_probe_runs_fits_profiles_and_keeps_files(tmp_path: Path) -> None:
    spec = ProbeSpec(widths=(64, 128, 256), mode="forward", repeats=2)
    result = run_probe(spec, out=tmp_path / "out")
    assert sorted(result.timings) == [64, 128, 256] and result.profiled_width == 256
    assert all(t.repeats == 2 and len(t.times_s) == 2 for t in result.timings.values())
    assert result.kernels.source == "cpu_ops" and result.kernels.share("attention") > 0
    assert result.verdict in ("agree", "disagree")
    assert result.cross_check_line().startswith("quadratic share (fit) ")
    assert " vs attention share (kernels) " in result.cross_check_line()
    assert result.peak.source.startswith("measured peak")
    assert result.flops.mfu.intended is not None  # measured peak on CPU
    widths, seconds = read_points(tmp_path / "out" / "points.csv")
    assert sorted(set(widths.tolist())) == [64.0, 128.0, 256.0] and len(seconds) == 6
    assert kernel_table(load_trace(tmp_path / "out" / "trace.json.gz")).source == "cpu_ops"
    saved = json.loads((tmp_path / "out" / "probe.json").read_text())
    assert {"points", "fit", "kernels", "cross_check", "flops"} <= saved.keys()


def test_out_of_memory_width_is_skipped(monkeypatch) -> None:
    real = probe_mod.time_fn
    calls = {"n": 0}

    def flaky(fn, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(fn, **kw)

    monkeypatch.setattr(probe_mod, "time_fn", flaky)
    result = run_probe(ProbeSpec(widths=(64, 96, 128, 256), mode="forward", repeats=2))
    assert list(result.skipped) == [96] and "out of memory" in result.skipped[96]
    assert sorted(result.timings) == [64, 128, 256]


def test_other_runtime_errors_are_not_swallowed(monkeypatch) -> None:
    def broken(fn, **kw):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(probe_mod, "time_fn", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        run_probe(ProbeSpec(widths=(64, 128, 256), mode="forward", repeats=2))


@pytest.mark.parametrize(
    "kw,fragment",
    [
        ({"widths": (64, 128)}, "at least 3 distinct widths"),
        ({"widths": (100, 150, 200)}, "span 2.00x"),
        ({"attn": "flex_attention", "mode": "full"}, "flex_attention has no backward on CPU"),
        ({"mode": "forward", "grad_ckpt": True}, "--grad-ckpt needs a backward pass"),
        ({"device": "tpu"}, "--device 'tpu' is not known"),
    ],
)
def test_bad_probe_specs(kw: dict, fragment: str) -> None:
    with pytest.raises(TuneproofError, match=fragment.replace(".", r"\.")):
        ProbeSpec(**kw)


def test_probe_command_json_and_errors(capsys, tmp_path: Path) -> None:
    assert main(["probe", "--widths", "64,128,256", "--mode", "forward", "--repeats", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {"width", "quad_share_fit", "attention_share_kernels", "gap_points", "verdict"} <= d[
        "cross_check"
    ].keys()
    assert main(["probe", "--widths", "64,abc"]) == 2
    assert "not a comma list of integers" in capsys.readouterr().err
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["probe", "--widths", "64,128,256", "--out", str(f)]) == 2
    assert f.read_text() == "x"


@pytest.mark.parametrize(
    "kw",
    [
        {"mode": "lora", "grad_ckpt": True},
        {"mode": "full", "attn": "eager", "batch": 2},
    ],
    ids=["lora-ckpt", "full-eager"],
)
def test_probe_training_modes_run(kw: dict) -> None:
    result = run_probe(ProbeSpec(widths=(32, 64, 128), repeats=2, **kw))
    assert sorted(result.timings) == [32, 64, 128]
    assert result.flops.run.mode == kw["mode"]


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_probe_on_cuda_reads_device_kernels() -> None:
    result = run_probe(ProbeSpec(widths=(256, 512, 1024), mode="full", device="cuda", repeats=2))
    assert result.kernels.source == "device" and result.kernels.device is not None
    assert result.kernels.share("attention") > 0


def test_a_model_too_large_for_this_machine_is_refused_before_building(capsys) -> None:
    from tuneproof.arch import resolve_text_config, tiny_config_path
    from tuneproof.model import build_model, parameter_estimate

    tiny = resolve_text_config(tiny_config_path())
    built = build_model(tiny, "sdpa")
    assert parameter_estimate(tiny) == pytest.approx(sum(p.numel() for p in built.parameters()), rel=0.01)
    case = str(Path(__file__).parent.parent / "examples" / "gemma4-26b-a4b-like" / "config.json")
    assert main(["probe", "--config", case]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: gemma4_text with ~25.2B parameters needs") and "--device cuda" in err


def test_doctor_skips_the_probe_with_the_reason_for_a_large_model(capsys) -> None:
    case = str(Path(__file__).parent.parent / "examples" / "gemma4-26b-a4b-like" / "config.json")
    assert main(["doctor", "--config", case, "--json"]) == 0
    sections = json.loads(capsys.readouterr().out)["sections"]
    assert "25.2B parameters" in sections["probe"]["skipped"]
    assert sections["flops"]["rows"] and sections["batching"]["samplers"]
