"""Reports: every PNG decodes and shows exactly the series report.json holds (embedded in the PNG)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuneproof.cli.app import main
from tuneproof.core.report import png_series

pytestmark = pytest.mark.slow  # a doctor run and a training run


def _check_folder(folder: Path, expected: set[str]) -> dict:
    from PIL import Image

    report = json.loads((folder / "report.json").read_text())
    assert set(report["plots"]) == expected
    markdown = (folder / "report.md").read_text()
    for name, plot in report["plots"].items():
        png = folder / plot["file"]
        with Image.open(png) as image:
            image.verify()  # decodes as a PNG
        assert png_series(png) == plot["series"], name  # the picture's data is the JSON's
        assert f"]({plot['file']})" in markdown
        assert all(len(s["x"]) == len(s["y"]) > 0 for s in plot["series"].values()), name
    return report


def test_doctor_report_holds_the_waterfall_the_fit_the_kernels_and_the_samplers(tmp_path: Path) -> None:
    assert main(["doctor", "--probe-budget", "2", "--report", str(tmp_path / "r"), "--json"]) == 0
    report = _check_folder(tmp_path / "r", {"flop_waterfall", "scaling_fit", "kernel_classes", "samplers"})
    waterfall = report["plots"]["flop_waterfall"]["series"]["flops"]
    detail = report["data"]["sections"]["flops"]["detail"]
    assert (
        waterfall["y"][0] == detail["intended"]["total"]
        and waterfall["y"][-1] == detail["performed"]["total"]
    )
    assert waterfall["y"][0] + sum(waterfall["y"][1:-1]) == pytest.approx(
        waterfall["y"][-1]
    )  # excesses add up


TRAIN_PLOTS = {"training", "flop_waterfall", "scaling_fit", "kernel_classes", "samplers"}


def test_train_writes_a_report_with_every_plot_of_its_own_run(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    # the report's probe refuses a floor past its budget (issue 35), so the budget must hold the floor:
    # a few seconds on a quiet 2-core machine, at most a minute
    recipe.write_text("[optim]\nmax_steps = 4\n[run]\nprobe_budget_s = 60\n")
    assert main(["train", str(recipe), "--output", str(tmp_path / "run")]) == 0
    report = _check_folder(tmp_path / "run" / "report", TRAIN_PLOTS)
    series = report["plots"]["training"]["series"]
    logged = [h for h in report["data"]["log_history"] if "loss" in h]
    assert series["loss"]["y"] == [h["loss"] for h in logged] and len(logged) == 4
    assert "tflops_performed" in series  # no peak on the CPU: throughput instead of MFU, and said so
    assert report["plots"]["training"]["note"].startswith("no MFU")
    assert len(report["data"]["steps"]) == 4
    sections = report["data"]["sections"]
    detail = sections["flops"]["detail"]  # one real micro-batch of the run: its rows' own lengths
    assert detail["run"]["lengths"] and max(detail["run"]["lengths"]) <= detail["run"]["seq_len"]
    assert sections["batching"]["num_lengths"] == 320  # the embedded corpus, every row
    assert sections["probe"]["spec"]["mode"] == "lora" and sections["probe"]["spec"]["batch"] == 2
    assert report["data"]["notes"] == []


def test_without_the_probe_the_report_says_which_plots_are_missing_and_why(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text("[optim]\nmax_steps = 1\ngrad_accum = 1\n[run]\nprobe_budget_s = 0\n")
    assert main(["train", str(recipe), "--output", str(tmp_path / "run"), "--json"]) == 0
    report = _check_folder(tmp_path / "run" / "report", TRAIN_PLOTS - {"scaling_fit", "kernel_classes"})
    assert report["data"]["notes"] == [
        "no scaling fit or kernel classes: run.probe_budget_s is 0 (the probe is off)"
    ]
    assert "Not measured: no scaling fit" in (tmp_path / "run" / "report" / "report.md").read_text()


def test_a_report_folder_that_cannot_be_written_is_refused_before_the_doctor_runs(
    tmp_path: Path, capsys
) -> None:
    (tmp_path / "file").write_text("x")
    assert main(["doctor", "--report", str(tmp_path / "file")]) == 2
    assert "is a file" in capsys.readouterr().err
