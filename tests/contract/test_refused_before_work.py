"""Refusals come before the heavy work: a bad output path or a missing extra is named before torch or
transformers is imported (issue 35: on two cores shared with heavy jobs, `quant-audit` took 41 s to
name its missing extra, `train --output FILE` 118 s, because the imports came first).

Each case runs the command in a fresh interpreter and reports, at the refusal, whether torch or
transformers had been imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import importlib.util, json, sys
hidden = set(sys.argv[1].split(",")) - {""}
real = importlib.util.find_spec
importlib.util.find_spec = lambda n, *a: None if n in hidden else real(n, *a)
from tuneproof.cli.app import main
code = main(sys.argv[2:])
loaded = {name: name in sys.modules for name in ("torch", "transformers")}
print(json.dumps({"code": code, **loaded}))
"""


def _refusal(tmp_path: Path, argv: list[str], hidden: str = "") -> tuple[dict[str, object], str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, hidden, *argv],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.parametrize(
    "argv,hidden,needle",
    [
        (["train", "--output", "afile"], "", "afile is a file"),
        (["train", "--output", "full"], "", "full is not empty and holds no tuneproof run"),
        (["merge", "--base", "full", "--adapter", "full", "--out", "full"], "", "full already exists"),
        (["quant-audit", "--recipe", "r.yaml", "--config", "full"], "compressed_tensors",
         "pip install 'tuneproof[quant]'"),
    ],
)  # fmt: skip
def test_refused_before_torch_is_imported(tmp_path: Path, argv: list[str], hidden: str, needle: str) -> None:
    (tmp_path / "afile").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "config.json").write_text("{}")
    (tmp_path / "r.yaml").write_text("quant_stage: {}\n")
    result, err = _refusal(tmp_path, argv, hidden)
    assert result["code"] == 2 and needle in err and err.count("\n") == 1, err
    assert result == {"code": 2, "torch": False, "transformers": False}
