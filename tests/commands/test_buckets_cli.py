"""`tuneproof buckets`, the lengths file format, and the attention FLOPs each plan performs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError
from tuneproof.data import read_lengths


@pytest.mark.slow  # 20,000 lengths through every planner
def test_buckets_json_on_the_shipped_set(capsys) -> None:
    assert main(["buckets", "--sweep", "1,16,256", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    s = d["samplers"]
    assert set(s) == {"bucketed", "random", "hf-length-grouped", "packing"}
    for v in s.values():
        assert {
            "padding_fraction",
            "zero_pad_share",
            "roots_per_window",
            "length_mix",
            "plan_seconds",
        } <= v.keys()
    assert s["bucketed"]["padding_fraction"] <= 0.002 < s["random"]["padding_fraction"]
    assert s["hf-length-grouped"]["length_mix"] < 0.2 * s["random"]["length_mix"]  # homogeneous steps
    roots = [row["roots_per_window"] for row in d["sweep"]]
    pads = [row["padding_fraction"] for row in d["sweep"]]
    assert max(roots) - min(roots) < 0.02 * max(roots) and pads == sorted(pads)


@pytest.mark.slow  # 20,000 lengths through every planner
def test_buckets_with_ranks_prints_each_samplers_utilisation(capsys) -> None:
    assert main(["buckets", "--sweep", "", "--ranks", "8", "--grad-accum", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    use = {name: v["ranks"]["utilisation"] for name, v in d["samplers"].items()}
    assert set(use) == {"bucketed", "bucketed (interleaved)", "random", "hf-length-grouped", "packing"}
    assert use["bucketed"] >= 0.97 and use["packing"] >= 0.97  # rank-synchronous
    assert use["bucketed (interleaved)"] < 0.3 and use["random"] < 0.3  # the stragglers
    assert d["ranks"] == 8 and d["step_cost"] == {"A": 6.87e-4, "B": 8.85e-8, "C": 0.0}
    assert d["samplers"]["bucketed"]["ranks"]["steps"] == 1250  # 10,000 micro-batches over 8 ranks
    assert main(["buckets", "--sweep", "", "--ranks", "2", "--fit", "1e-3,0"]) == 0
    assert "rank use" in capsys.readouterr().out


@pytest.mark.slow  # 20,000 lengths through every planner
def test_attention_flops_flip_between_sdpa_and_flex(capsys) -> None:
    out = {}
    for attn in ("sdpa", "flex_attention"):
        assert (
            main(
                [
                    "buckets",
                    "--config",
                    "tiny",
                    "--attn",
                    attn,
                    "--compare",
                    "packing",
                    "--sweep",
                    "",
                    "--json",
                ]
            )
            == 0
        )
        out[attn] = json.loads(capsys.readouterr().out)["samplers"]
    sdpa, flex = out["sdpa"], out["flex_attention"]
    # under SDPA packed rows get a dense block-diagonal mask: bucketing wins; flex skips off-document blocks
    assert (
        sdpa["packing"]["attention_flops"]["performed"] > 3 * sdpa["bucketed"]["attention_flops"]["performed"]
    )
    assert (
        flex["packing"]["attention_flops"]["performed"] < 2 * flex["bucketed"]["attention_flops"]["performed"]
    )
    assert sdpa["bucketed"]["attention_flops"]["intended"] == flex["bucketed"]["attention_flops"]["intended"]


def test_packed_plans_are_costed_by_the_path_table() -> None:
    from tiny_models import config_dict
    from tuneproof.arch import from_config
    from tuneproof.attention.pairs import flex_document_pairs
    from tuneproof.data.compare import attention_flops

    shape = from_config(config_dict("llama", num_hidden_layers=1))
    lengths = np.array([100, 200, 30, 300])
    plan = [np.arange(4)]
    per_pair = 2.0 * 4 * (16 + 16)  # heads x (head_dim + v_head_dim), one layer
    flex = attention_flops(shape, "flex_attention", plan, lengths, packed=True)
    assert flex["performed"] == flex_document_pairs(lengths, None) * per_pair
    assert attention_flops(shape, "sdpa", plan, lengths, packed=True)["performed"] == 630 * 630 * per_pair
    with pytest.raises(TuneproofError, match="'xformers' is not a known attention path"):
        attention_flops(shape, "xformers", plan, lengths, packed=True)


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "lengths.txt"
    p.write_text(text)
    return p


def test_lengths_formats(tmp_path: Path) -> None:
    lengths, roots = read_lengths(_write(tmp_path, "5\n7\n\n9\n"))
    assert lengths.tolist() == [5, 7, 9] and roots is None
    lengths, roots = read_lengths(
        _write(
            tmp_path, '{"length": 5, "root": "a"}\n{"length": 6, "root": "b"}\n{"length": 7, "root": "a"}\n'
        )
    )
    assert lengths.tolist() == [5, 6, 7] and roots.tolist() == [0, 1, 0]


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("", "holds no lengths"),
        ("5\n0\n", ":2: length 0 must be > 0"),
        ("5\n-3\n", ":2: length -3 must be > 0"),
        ("5\n2.5\n", ":2: length '2.5' is not an integer"),
        ("5\nabc\n", ":2: length 'abc' is not an integer"),
        ('{"len": 5}\n', ":1: no 'length' key"),
        ('{"length": 5, "root": 1}\n{"length": 6}\n', "some rows have a root"),
    ],
)
def test_bad_lengths_files(tmp_path: Path, capsys, text: str, fragment: str) -> None:
    with pytest.raises(TuneproofError) as e:
        read_lengths(_write(tmp_path, text))
    assert fragment in e.value.message
    assert main(["buckets", "--lengths", str(tmp_path / "lengths.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--micro-batch", "0"], "--micro-batch must be >= 1, got 0"),
        (["--grad-accum", "-2"], "--grad-accum must be >= 1, got -2"),
        (["--compare", "fairseq"], "--compare 'fairseq' is not known"),
        (["--sweep", "1,x"], "not a comma list of integers"),
        (["--lengths", "/nonexistent"], "lengths file not found"),
    ],
)
def test_bad_buckets_flags(capsys, args: list[str], fragment: str) -> None:
    assert main(["buckets", *args]) == 2
    assert fragment in capsys.readouterr().err
