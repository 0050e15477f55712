"""The `tuneproof` command, run in-process: output contracts and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from tuneproof.cli.app import main

CASE = str(Path(__file__).parent.parent.parent / "examples" / "gemma4-26b-a4b-like" / "config.json")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_flops_json_contract(capsys) -> None:
    code, out, err = run(
        capsys,
        "flops",
        "--config",
        CASE,
        "--seq-len",
        "16384",
        "--batch",
        "2",
        "--mode",
        "lora",
        "--grad-ckpt",
        "--step-time",
        "34.85",
        "--peak-tflops",
        "315",
        "--json",
    )
    assert code == 0, err
    d = json.loads(out)
    assert d["intended"]["total"] > 0 and d["performed"]["total"] > d["intended"]["total"]
    assert all({"name", "flops", "why"} <= e.keys() for e in d["excess"])
    m = d["mfu"]
    assert {"intended", "performed", "peak_tflops", "peak_source", "reason"} <= m.keys()
    assert m["peak_tflops"] == 315 and m["intended"] == pytest.approx(d["intended"]["total"] / 34.85 / 315e12)


def test_flops_gpu_peak_and_table_output(capsys) -> None:
    code, out, _ = run(
        capsys,
        "flops",
        "--seq-len",
        "512",
        "--batch",
        "2",
        "--padding-fraction",
        "0.25",
        "--step-time",
        "0.1",
        "--gpu",
        "NVIDIA H100 80GB HBM3",
    )
    assert code == 0
    assert "mfu_bf16_intended" in out and "mfu_bf16_performed" in out and "H100 SXM" in out
    assert "padding: GEMMs on pad tokens" in out


def test_mfu_unknown_without_step_time(capsys) -> None:
    code, out, _ = run(capsys, "flops", "--seq-len", "64", "--json")
    d = json.loads(out)
    assert code == 0 and d["mfu"]["intended"] is None and d["mfu"]["reason"]


def test_unknown_dtype_peak_is_unknown_not_guessed(capsys) -> None:
    code, out, _ = run(
        capsys, "flops", "--seq-len", "64", "--step-time", "1", "--gpu", "A100", "--dtype", "fp8", "--json"
    )
    d = json.loads(out)
    assert code == 0 and d["mfu"]["intended"] is None and "fp8" in d["mfu"]["reason"]


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--config", "/nonexistent/config.json", "--seq-len", "8"], "config not found"),
        (["--seq-len", "0"], "--seq-len must be >= 1, got 0"),
        (["--seq-len", "-3"], "--seq-len must be >= 1, got -3"),
        (["--seq-len", "8", "--padding-fraction", "1.0"], "--padding-fraction must be < 1, got 1"),
        (["--seq-len", "8", "--padding-fraction", "-0.1"], "--padding-fraction must be >= 0, got -0.1"),
        (
            ["--seq-len", "8", "--padding-fraction", "nan"],
            "--padding-fraction must be a finite number, got nan",
        ),
        (["--seq-len", "8", "--gpu", "Voodoo 5"], "unknown GPU 'Voodoo 5' (--gpu)"),
        (
            ["--seq-len", "8", "--step-time", "1.0"],
            "--step-time needs a peak for MFU (add --gpu or --peak-tflops)",
        ),
        (["--seq-len", "8", "--step-time", "inf", "--gpu", "A100"], "--step-time must be a finite number"),
        (["--seq-len", "8", "--peak-tflops", "-5"], "--peak-tflops must be >= 1e-06, got -5"),
        (["--seq-len", "8", "--dtype", "int3"], "--dtype 'int3' is not known"),
        (["--seq-len", "8", "--attn", "xformers"], "--attn 'xformers' is not a known attention path"),
        (["--seq-len", "8", "--mode", "lora", "--lora-targets", "nonexistent_proj"], "matches no nn.Linear"),
        (
            ["--seq-len", "8", "--mode", "lora", "--lora-target-parameters", "experts.up_proj"],
            "--lora-target-parameters 'experts.up_proj' matches no fused expert parameter or GEMM weight of "
            "this gemma4_text model (its fused expert parameters: experts.down_proj, experts.gate_up_proj)",
        ),
        (
            ["--seq-len", "8", "--mode", "lora", "--lora-targets", "none"],
            "--lora-targets is empty (give module names, all-linear, or --lora-target-parameters)",
        ),
        (["--seq-len", "abc"], "not a valid integer"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, args: list[str], fragment: str) -> None:
    code, _, err = run(capsys, "flops", *args)
    assert code == 2
    assert err.startswith("error: ") and fragment in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_invalid_and_unsupported_configs(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code, _, err = run(capsys, "flops", "--config", str(bad), "--seq-len", "8")
    assert code == 2 and "not valid JSON" in err
    bad.write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    code, _, err = run(capsys, "flops", "--config", str(bad), "--seq-len", "8")
    assert code == 2 and "bert is a bidirectional encoder" in err and "docs/families.md" in err
    bad.write_text(json.dumps({"model_type": "no_such_model", "hidden_size": 8}))
    code, _, err = run(capsys, "flops", "--config", str(bad), "--seq-len", "8")
    assert code == 2 and "unsupported model_type 'no_such_model'" in err


def test_unknown_gpu_error_lists_known_names(capsys) -> None:
    _, _, err = run(capsys, "flops", "--seq-len", "8", "--gpu", "Voodoo 5")
    assert "H100 SXM" in err and "RTX PRO 6000 Blackwell" in err


@pytest.mark.slow
def test_doctor_prints_and_writes_report(capsys, tmp_path: Path) -> None:
    code, out, _ = run(capsys, "doctor", "--out", str(tmp_path / "rep"), "--probe-budget", "5")
    assert code == 0 and "FLOPs per step" in out and "excess" in out
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["title"] == "tuneproof doctor" and report["plots"] == {}  # the one report.json format
    sections = report["data"]["sections"]
    assert list(sections) == ["flops", "memory", "attention dispatch", "batching", "probe", "projection"]
    projection = sections["projection"]["samplers"]  # the probe's fit over the shipped lengths
    assert projection["random"]["wall_s"] > projection["ours"]["wall_s"] > 0
    assert sections["projection"]["line"].startswith("projection, forward pass on this device: ours ")
    assert sections["probe"]["cross_check"]["verdict"] in ("agree", "disagree", "inconclusive")
    assert sections["flops"]["rows"]
    assert sections["attention dispatch"]["predicted_sm120"]["layers"][0]["backend"] == "efficient"
    assert sections["batching"]["samplers"]["bucketed"]["padding_fraction"] < 0.002
    assert [p.name for p in (tmp_path / "rep").iterdir()] == ["report.json"]  # no temp files left


def test_doctor_out_on_a_file_leaves_it_untouched(capsys, tmp_path: Path) -> None:
    f = tmp_path / "precious.txt"
    f.write_text("keep me")
    code, _, err = run(capsys, "doctor", "--out", str(f))
    assert code == 2 and err.startswith("error: ") and f.read_text() == "keep me"


def test_help_loads_no_heavy_module() -> None:
    """`tuneproof --help` must start fast: torch, transformers, numpy and rich load lazily."""
    code = (
        "import sys; from tuneproof.cli.app import main; main(['--help']); "
        "heavy = [m for m in ('torch', 'transformers', 'numpy', 'rich.table') if m in sys.modules]; "
        "print('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out and "flops" in out and "doctor" in out


def test_console_script_exit_code(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "tuneproof"
    r = subprocess.run([str(exe), "flops", "--seq-len", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_flops_refuses_a_bad_step_time_before_reading_the_model(monkeypatch, capsys) -> None:
    """Fresh eyes: `flops --step-time 0` took 7-11 s to refuse (the config was read first)."""
    import tuneproof.cli.common as common

    def never(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("the model was read before the step time was checked")

    monkeypatch.setattr(common, "resolve_model", never)
    assert main(["flops", "--seq-len", "8", "--step-time", "0", "--peak-tflops", "1"]) == 2
    assert (
        capsys.readouterr().err
        == "error: --step-time must be >= 1e-06, got 0 (pass measured seconds per step)\n"
    )


def test_an_mfu_over_100_percent_is_flagged(capsys) -> None:
    assert main(["flops", "--seq-len", "1024", "--step-time", "0.0001", "--peak-tflops", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mfu"]["performed"] > 1.0
    assert any(n.startswith("performed MFU ") and "is over 100 %" in n for n in out["notes"])


def test_lora_target_parameters_repeat_or_take_a_comma_list(capsys) -> None:
    """`--lora-targets none` with the experts adapted in place: the merges are their own rows."""
    base = ["flops", "--seq-len", "64", "--mode", "lora", "--lora-targets", "none", "--json"]
    both = "experts.gate_up_proj,experts.down_proj"
    code, out, _ = run(capsys, *base, "--lora-target-parameters", both)
    listed = json.loads(out)
    code2, out2, _ = run(
        capsys,
        *base,
        "--lora-target-parameters",
        "experts.gate_up_proj",
        "--lora-target-parameters",
        "down_proj",
    )
    assert code == code2 == 0 and json.loads(out2) == listed
    assert listed["performed"]["by_component"]["lora.experts"] > 0
    assert "lora.experts" not in listed["intended"]["by_component"]
    assert "lora" not in listed["performed"]["by_component"]  # no nn.Linear adapted
    assert any(e["name"].startswith("LoRA on fused experts") for e in listed["excess"])


@pytest.mark.parametrize(
    "args,warning",
    [
        (["--gpu", "H200"], "warning: --gpu has no effect without --step-time (MFU needs a step time)\n"),
        (
            ["--peak-tflops", "9"],
            "warning: --peak-tflops has no effect without --step-time (MFU needs a step time)\n",
        ),
        (["--lora-rank", "4"], "warning: --lora-rank has no effect without --mode lora\n"),
        (
            ["--lora-target-parameters", "experts.down_proj"],
            "warning: --lora-target-parameters has no effect without --mode lora\n",
        ),
        (["--gpu", "H200", "--step-time", "1"], ""),
    ],
)
def test_flops_warns_about_options_without_effect(capsys, args: list[str], warning: str) -> None:
    assert main(["flops", "--seq-len", "8", *args]) == 0
    assert capsys.readouterr().err == warning


def _leaves(group: click.Group, path: str = "") -> list[tuple[str, click.Command]]:
    out = []
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out += _leaves(cmd, f"{path}{name} ")
        else:
            out.append((f"{path}{name}", cmd))
    return out


def test_an_option_given_twice_is_refused_by_every_command(capsys) -> None:
    """Issue 35: an option given twice silently kept the last (`--seq-len 4096 ... --seq-len 512`).
    Every command is a `Command`, whose parser refuses a repeated single-value option or flag."""
    from tuneproof.cli.app import app
    from tuneproof.cli.common import Command

    leaves = _leaves(app)
    assert len(leaves) >= 20 and all(isinstance(cmd, Command) for _, cmd in leaves), [
        name for name, cmd in leaves if not isinstance(cmd, Command)
    ]
    for argv, needle in (
        (["flops", "--seq-len", "64", "--seq-len", "128"], "--seq-len is given twice ('64', then '128')"),
        (["flops", "--seq-len=64", "--json", "--json"], "--json is given twice"),
        (["probe", "--budget", "5", "--budget=9"], "--budget is given twice ('5', then '9')"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
    assert (
        main(["flops", "--seq-len", "64", "--lora-target-parameters", "a", "--lora-target-parameters", "b"])
        == 2
    )
    assert "given twice" not in capsys.readouterr().err  # a repeatable option stays repeatable
