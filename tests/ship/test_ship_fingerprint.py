"""Safetensors headers checked before trusted; `tuneproof fingerprint` and `--compare` naming an ablation."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

import ship_fakes as fx
from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError
from tuneproof.ship.identity import characterise, diff_fingerprints, fingerprint, read_fingerprint
from tuneproof.ship.tensors import ShardWriter, open_checkpoint, read_header


def _file(path: Path, header: dict, data: bytes) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


@pytest.mark.parametrize(
    ("header", "data", "needle"),
    [
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, "past the end"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 6]}}, b"\0" * 8, "needs 8"),
        ({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "unknown dtype"),
        ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8, "bad shape"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}, b"\0" * 8, "bad data_offsets"),
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
            },
            b"\0" * 12,
            "overlap",
        ),
        ({"a": [1, 2]}, b"", "not an object"),
    ],
)
def test_a_bad_header_is_refused_naming_what_is_wrong(
    header: dict, data: bytes, needle: str, tmp_path: Path
) -> None:
    with pytest.raises(TuneproofError, match=needle):
        read_header(_file(tmp_path / "m.safetensors", header, data))


def test_a_truncated_or_garbage_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "short.safetensors").write_bytes(b"\1\2")
    with pytest.raises(TuneproofError, match="shorter than the 8-byte"):
        read_header(tmp_path / "short.safetensors")
    (tmp_path / "big.safetensors").write_bytes(struct.pack("<Q", 10**6) + b"{}")
    with pytest.raises(TuneproofError, match="does not fit"):
        read_header(tmp_path / "big.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{]")
    with pytest.raises(TuneproofError, match="not JSON"):
        read_header(tmp_path / "junk.safetensors")


def test_the_writer_writes_files_the_safetensors_library_reads(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    a, b = torch.randn(3, 5), torch.arange(7, dtype=torch.int64)
    writer = ShardWriter(
        tmp_path / "w.safetensors", [("a", "F32", (3, 5)), ("b", "I64", (7,))], {"format": "pt"}
    )
    writer.put("a", a.numpy().tobytes())
    writer.put("b", b.numpy().tobytes()[:20])  # a tensor in pieces
    writer.put("b", b.numpy().tobytes()[20:])
    writer.close()
    got = load_file(tmp_path / "w.safetensors")
    assert torch.equal(got["a"], a) and torch.equal(got["b"], b)
    assert read_header(tmp_path / "w.safetensors").metadata == {"format": "pt"}


def test_an_index_naming_a_missing_shard_is_refused(tmp_path: Path) -> None:
    fx.save(fx.model("llama"), tmp_path / "m", max_shard_size="40KB")
    shards = sorted((tmp_path / "m").glob("*.safetensors"))
    shards[0].unlink()
    with pytest.raises(TuneproofError, match="which is not in"):
        open_checkpoint(tmp_path / "m")


def test_the_fingerprint_is_per_tensor_and_stable_across_resaves_and_sharding(tmp_path: Path) -> None:
    model = fx.model("llama")
    one = fingerprint(fx.save(model, tmp_path / "one"))
    sharded = fingerprint(fx.save(model, tmp_path / "sharded", max_shard_size="40KB"))
    assert one.digest == sharded.digest and len(one.tensors) == 21
    other = fx.model("llama", seed=1)
    assert fingerprint(fx.save(other, tmp_path / "other")).digest != one.digest


def _abliterate(model: torch.nn.Module, per_layer_direction: bool = False) -> None:
    gen = torch.Generator().manual_seed(3)
    r = torch.randn(model.config.hidden_size, generator=gen)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if per_layer_direction:
                r = torch.randn(model.config.hidden_size, generator=gen)
            u, w = r / r.norm(), p.float()
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.copy_(w - torch.outer(u, u @ w))  # W - r r^T W
            elif name.endswith("embed_tokens.weight"):
                p.copy_(w - torch.outer(w @ u, u))  # W - W r r^T


def test_compare_names_a_directional_ablation(tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("llama", dtype=torch.bfloat16), tmp_path / "base")
    edited = fx.model("llama", dtype=torch.bfloat16)
    _abliterate(edited)
    fx.save(edited, tmp_path / "abliterated")
    assert main(["fingerprint", "--compare", str(base), str(tmp_path / "abliterated")]) == 1
    out = capsys.readouterr().out
    assert "differ    5 tensors: 5 changed" in out
    assert "looks like directional ablation (abliteration)" in out
    assert main(["fingerprint", "--compare", str(base), str(tmp_path / "abliterated"), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["characterisation"]["ablation"] is True
    assert {c["rank"] for c in data["characterisation"]["changes"]} == {1}


def test_rank_1_edits_along_different_directions_are_not_an_ablation(tmp_path: Path) -> None:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    edited = fx.model("llama")
    _abliterate(edited, per_layer_direction=True)
    fx.save(edited, tmp_path / "edited")
    a, b = open_checkpoint(base), open_checkpoint(tmp_path / "edited")
    result = characterise(a, b, diff_fingerprints(fingerprint(a), fingerprint(b)).changed)
    assert not result.ablation and "rank <= 2" in result.verdict
    assert all(c.rank == 1 for c in result.changes)


def test_a_fine_tune_is_a_broad_change_not_an_ablation(tmp_path: Path) -> None:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    tuned = fx.model("llama")
    with torch.no_grad():
        for name, p in tuned.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.add_(torch.randn_like(p) * 0.01)
    fx.save(tuned, tmp_path / "tuned")
    a, b = open_checkpoint(base), open_checkpoint(tmp_path / "tuned")
    result = characterise(a, b, diff_fingerprints(fingerprint(a), fingerprint(b)).changed)
    assert not result.ablation and "4 by a broader change" in result.verdict


def test_identical_models_compare_equal_and_exit_0(tmp_path: Path, capsys) -> None:
    model = fx.model("llama")
    fx.save(model, tmp_path / "a")
    fx.save(model, tmp_path / "b", max_shard_size="40KB")
    assert main(["fingerprint", "--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "IDENTICAL" in capsys.readouterr().out


def test_out_writes_a_fingerprint_that_compares_against_a_folder(tmp_path: Path, capsys) -> None:
    fx.save(fx.model("llama"), tmp_path / "base")
    out = tmp_path / "fp.json"
    assert main(["fingerprint", str(tmp_path / "base"), "--out", str(out)]) == 0
    assert read_fingerprint(out).digest in capsys.readouterr().out
    assert main(["fingerprint", "--compare", str(out), str(tmp_path / "base")]) == 0
    # an edited fingerprint file is refused
    data = json.loads(out.read_text())
    first = next(iter(data["tensors"]))
    data["tensors"][first]["sha256"] = "0" * 64
    out.write_text(json.dumps(data))
    assert main(["fingerprint", "--compare", str(out), str(tmp_path / "base")]) == 2
    assert "was edited" in capsys.readouterr().err


def test_fingerprint_refuses_pickle_only_folders_and_bad_argument_mixes(tmp_path: Path, capsys) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "pytorch_model.bin").write_bytes(b"x")
    assert main(["fingerprint", str(tmp_path / "m")]) == 2
    assert "pickle" in capsys.readouterr().err
    assert main(["fingerprint"]) == 2
    assert "no model folder given" in capsys.readouterr().err
    assert main(["fingerprint", str(tmp_path / "m"), "--compare", "a", "b"]) == 2
    assert "--compare takes its two folders alone" in capsys.readouterr().err


def test_a_rank_above_what_was_estimated_is_shown_as_a_lower_bound(tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    edited = fx.model("llama")
    with torch.no_grad():
        w = edited.model.layers[0].mlp.down_proj.weight
        w.add_(torch.randn(w.shape[0], 16) @ torch.randn(16, w.shape[1]) * 0.01)  # a rank-16 change
    fx.save(edited, tmp_path / "edited")
    a, b = open_checkpoint(base), open_checkpoint(tmp_path / "edited")
    (change,) = characterise(a, b, diff_fingerprints(fingerprint(a), fingerprint(b)).changed).changes
    assert change.rank == 8 and change.rank_at_least
    main(["fingerprint", "--compare", str(base), str(tmp_path / "edited")])
    assert ">=8" in capsys.readouterr().out


def test_out_never_overwrites_a_recorded_fingerprint(tmp_path: Path, capsys) -> None:
    fx.save(fx.model("llama"), tmp_path / "base")
    (tmp_path / "fp.json").write_text("recorded")
    assert main(["fingerprint", str(tmp_path / "base"), "--out", str(tmp_path / "fp.json")]) == 2
    assert "never overwritten" in capsys.readouterr().err
    assert (tmp_path / "fp.json").read_text() == "recorded"


def test_an_fp32_base_against_its_bf16_merge_is_compared_in_fp32(tmp_path: Path, capsys) -> None:
    """An fp32 base against a bf16 merge differs in every tensor's dtype: each is compared in fp32,
    the LoRA-touched ones are characterised and the rest are named casts (it called all of them
    'reshaped' and printed `changes   None`)."""
    base = fx.save(fx.model("llama"), tmp_path / "base")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    args = [
        "merge",
        "--base",
        str(base),
        "--adapter",
        str(tmp_path / "adapter"),
        "--out",
        str(tmp_path / "m"),
    ]
    assert main([*args, "--dtype", "bf16"]) == 0
    capsys.readouterr()
    assert main(["fingerprint", "--compare", str(base), str(tmp_path / "m")]) == 1
    out = capsys.readouterr().out
    assert "None" not in out and "reshaped:" not in out
    assert "0 reshaped" in out and "in another dtype" in out
    touched = [line for line in out.splitlines() if "F32 -> BF16, compared in fp32" in line]
    assert len(touched) == 4  # q_proj and o_proj of the two layers
    assert "more are casts only" in out
    assert max(len(line) for line in out.splitlines() if str(tmp_path) not in line) <= 80
    assert main(["fingerprint", "--compare", str(base), str(tmp_path / "m"), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["reshaped"] == [] and len(data["retyped"]) == len(data["characterisation"]["changes"])


def test_a_pure_cast_is_named_a_cast(tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    fx.save(fx.model("llama").to(torch.bfloat16), tmp_path / "cast")
    d = diff_fingerprints(fingerprint(open_checkpoint(base)), fingerprint(open_checkpoint(tmp_path / "cast")))
    assert d.changed == [] and d.reshaped == [] and d.retyped == d.comparable
    c = characterise(open_checkpoint(base), open_checkpoint(tmp_path / "cast"), d.comparable)
    assert c.verdict.startswith(f"every one of the {len(d.retyped)} differing tensors is a cast")
    assert not c.ablation
