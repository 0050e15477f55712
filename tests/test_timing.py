from __future__ import annotations

import json

import pytest

from tuneproof.cli.app import main
from tuneproof.errors import TuneproofError
from tuneproof.measure import time_fn


def test_warmup_is_excluded_and_repeats_counted() -> None:
    calls: list[int] = []
    timing = time_fn(lambda: calls.append(1), repeats=4, warmup=3)
    assert len(calls) == 7 and timing.repeats == 4 and timing.warmup == 3
    assert timing.min_s <= timing.median_s and timing.spread_s >= 0
    assert "4 repeats after 3 warm-up" in str(timing)


def test_single_run_is_refused() -> None:
    with pytest.raises(TuneproofError, match="a single run is not a measurement"):
        time_fn(lambda: None, repeats=1)


def test_peak_command_is_labelled_measured(capsys) -> None:
    assert main(["peak", "--dtype", "fp32", "--repeats", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["label"] == "measured peak" and d["tflops"] > 0 and d["timing"]["repeats"] == 2


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--dtype", "int4"], "cannot be measured"),
        (["--device", "tpu"], "--device 'tpu' is not known"),
    ],
)
def test_peak_bad_input(capsys, args: list[str], fragment: str) -> None:
    assert main(["peak", *args]) == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU error")
def test_peak_cuda_without_gpu(capsys) -> None:
    assert main(["peak", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
