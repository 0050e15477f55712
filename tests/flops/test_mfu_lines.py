"""The probe's MFU: printed once, with its interval, and the interval says what it leaves out
(fresh-eyes trial 21: the MFU lines were printed twice, and the interval covered only the step time
beside a measured peak with its own spread)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from tuneproof.measure.timing import Timing

STEPS = Timing(tuple(1.0 + 0.01 * i for i in range(8)), (False,) * 8, 1)


def _report(source: str) -> SimpleNamespace:
    mfu = SimpleNamespace(
        dtype="fp32", intended=0.2, performed=0.5, step_time_s=STEPS.median_s, reason=None,
        peak_tflops=0.2, peak_source=source,
    )  # fmt: skip
    return SimpleNamespace(
        mfu=mfu, intended=SimpleNamespace(total=4e10), performed=SimpleNamespace(total=1e11)
    )


@pytest.mark.parametrize(
    "source,scoped",
    [("measured peak (1024^3 GEMM on cpu, median of 4 runs)", True), ("H100 SXM: datasheet", False)],
)
def test_a_measured_peak_is_said_to_be_outside_the_mfu_interval(source: str, scoped: bool) -> None:
    from tuneproof.measure.probe_result import mfu_numbers

    for d in mfu_numbers(_report(source), STEPS):
        assert d.interval is not None
        said = "step time only: the measured peak's own run-to-run spread is not in it" in d.text()
        assert said is scoped
        assert (f"{d.name}_interval_scope" in d.to_dict()) is scoped


def test_the_probe_prints_the_mfu_once_with_its_interval() -> None:
    from tuneproof.flops.render import render_mfu

    out = io.StringIO()
    render_mfu(_report("measured peak (x)"), Console(file=out, width=200), mfu_lines=False)  # type: ignore[arg-type]
    text = out.getvalue()
    assert "mfu_fp32" not in text and "achieved:" in text and "peak:" in text
    import inspect

    from tuneproof.measure import render

    assert "render_mfu(rep, console, mfu_lines=False)" in inspect.getsource(render.render_probe)
