"""`tuneproof merge`: equal to PEFT's merge_and_unload, streamed, atomic, and refusing what it cannot do."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import ship_fakes as fx
from tuneproof.cli.app import main
from tuneproof.commands import merge as m
from tuneproof.core.errors import TuneproofError
from tuneproof.ship.merge_identity import identity
from tuneproof.ship.merge_plan import plan
from tuneproof.ship.merge_write import MergeResult
from tuneproof.ship.tensors import open_checkpoint


def _merge(base: Path, adapter: Path, out: Path, dtype: str | None = None) -> MergeResult:
    merge_plan = plan(base, adapter, out, dtype)
    return m.run(merge_plan, ident=identity(merge_plan.base, adapter))


def _cli_merge(base: Path, adapter: Path, out: Path, *extra: str) -> int:
    return main(["merge", "--base", str(base), "--adapter", str(adapter), "--out", str(out), *extra])


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))[:5]
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


@pytest.mark.parametrize("family", fx.FAMILIES)
def test_merge_equals_peft_merge_and_unload_in_fp32(family: str, tmp_path: Path) -> None:
    """rsLoRA, rank and alpha patterns and (for MoE families) target_parameters on the fused experts; the
    checkpoint keys of Qwen-MoE and Mixtral are per-expert, so the delta is split as transformers does."""
    base = fx.save(fx.model(family), tmp_path / "base")
    peft_model = fx.adapter(
        fx.model(family),
        tmp_path / "adapter",
        use_rslora=True,
        rank_pattern={"q_proj": 4},
        alpha_pattern={"o_proj": 32},
    )
    reference = fx.save(peft_model.merge_and_unload(), tmp_path / "peft")
    result = _merge(base, tmp_path / "adapter", tmp_path / "out")
    assert result.merged_tensors > 0
    assert _max_diff(fx.tensors(reference), fx.tensors(tmp_path / "out")) <= 1e-6
    # the merge really changed the adapted tensors
    assert _max_diff(fx.tensors(base), fx.tensors(tmp_path / "out")) > 1e-3


def test_a_sharded_base_is_merged_shard_by_shard_with_a_new_index(tmp_path: Path) -> None:
    base = fx.save(fx.model("qwen3_moe"), tmp_path / "base", max_shard_size="40KB")
    assert len(list(base.glob("*.safetensors"))) >= 4
    peft_model = fx.adapter(fx.model("qwen3_moe"), tmp_path / "adapter")
    reference = fx.save(peft_model.merge_and_unload(), tmp_path / "peft")
    _merge(base, tmp_path / "adapter", tmp_path / "out")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("*.safetensors")) == sorted(
        p.name for p in base.glob("*.safetensors")
    )
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == open_checkpoint(out).nbytes
    assert _max_diff(fx.tensors(reference), fx.tensors(out)) <= 1e-6
    assert {"config.json", "generation_config.json", "tuneproof_merge.json"} <= {
        p.name for p in out.iterdir()
    }
    # transformers loads the result
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out)


def test_a_bf16_merge_rounds_once_and_is_closer_to_the_fp32_merge_than_peft_bf16(tmp_path: Path) -> None:
    base_model = fx.model("llama", dtype=torch.bfloat16)
    base = fx.save(base_model, tmp_path / "base")
    fx.adapter(fx.model("llama"), tmp_path / "adapter", experts=False)
    # the truth: bf16 base weights + the fp32 delta, in fp32
    _merge(base, tmp_path / "adapter", tmp_path / "exact", dtype="fp32")
    ours = fx.tensors(_merge(base, tmp_path / "adapter", tmp_path / "ours").out)
    from peft import PeftModel

    peft_bf16 = PeftModel.from_pretrained(fx.model("llama", dtype=torch.bfloat16), tmp_path / "adapter")
    peft_bf16 = peft_bf16.to(torch.bfloat16).merge_and_unload()
    theirs = {k: v for k, v in peft_bf16.state_dict().items()}
    exact = fx.tensors(tmp_path / "exact")
    adapted = [k for k in exact if k.endswith(("q_proj.weight", "o_proj.weight"))]
    ours_err = sum(float((ours[k].float() - exact[k]).abs().sum()) for k in adapted)
    theirs_err = sum(float((theirs[k].float() - exact[k]).abs().sum()) for k in adapted)
    assert all(ours[k].dtype == torch.bfloat16 for k in adapted)
    # ours is the exact value rounded once: no element is more than half a bf16 step away
    for k in adapted:
        assert torch.equal(ours[k], exact[k].to(torch.bfloat16))
    assert ours_err < theirs_err


def test_dtype_casts_every_float_tensor_and_the_config(tmp_path: Path) -> None:
    base = fx.save(fx.model("qwen3"), tmp_path / "base")
    fx.adapter(fx.model("qwen3"), tmp_path / "adapter")
    out = _merge(base, tmp_path / "adapter", tmp_path / "out", dtype="bf16").out
    assert {t.dtype for t in fx.tensors(out).values()} == {torch.bfloat16}
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"


# --- base identity ---------------------------------------------------------------------------------------


def _abliterate(model: torch.nn.Module, seed: int = 5) -> None:
    gen = torch.Generator().manual_seed(seed)
    r = torch.randn(model.config.hidden_size, generator=gen)
    r /= r.norm()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.copy_(p - torch.outer(r, r @ p))


def test_a_merge_onto_an_abliterated_copy_is_refused_naming_the_ablation(tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    edited = fx.model("llama")
    _abliterate(edited)
    fx.save(edited, tmp_path / "abliterated")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    assert main(["fingerprint", str(base), "--out", str(tmp_path / "adapter" / "base_fingerprint.json")]) == 0
    before = fx.snapshot(tmp_path)
    capsys.readouterr()
    code = _cli_merge(tmp_path / "abliterated", tmp_path / "adapter", tmp_path / "out")
    err = capsys.readouterr().err
    assert code == 2
    assert "not the one the adapter was trained on" in err and "directional ablation (abliteration)" in err
    assert len(err.strip().splitlines()) == 1
    assert fx.snapshot(tmp_path) == before  # nothing written, nothing touched
    # overridden loudly
    code = _cli_merge(
        tmp_path / "abliterated", tmp_path / "adapter", tmp_path / "out", "--allow-base-mismatch"
    )
    err = capsys.readouterr().err
    assert code == 0 and "MERGING ONTO A DIFFERENT BASE" in err
    record = json.loads((tmp_path / "out" / "tuneproof_merge.json").read_text())
    assert record["base_identity"] == "DIFFERENT from recorded (allowed)"  # the words the console used


def test_a_merge_onto_the_recorded_base_passes_and_without_a_record_it_warns(tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    assert _cli_merge(base, tmp_path / "adapter", tmp_path / "a") == 0
    assert "identity cannot be checked" in capsys.readouterr().err
    main(["fingerprint", str(base), "--out", str(tmp_path / "adapter" / "base_fingerprint.json")])
    capsys.readouterr()
    assert _cli_merge(base, tmp_path / "adapter", tmp_path / "b") == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err and "identity same as recorded" in captured.out


# --- refusals --------------------------------------------------------------------------------------------


@pytest.fixture
def llama_pair(tmp_path: Path) -> tuple[Path, Path]:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    return base, tmp_path / "adapter"


def _refused(paths: tuple, capsys, tmp_path: Path, *needles: str) -> None:
    """`tuneproof merge --base --adapter --out [extra]` refused: one line, exit 2, nothing touched."""
    before = fx.snapshot(tmp_path)
    capsys.readouterr()
    assert _cli_merge(*paths) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    assert fx.snapshot(tmp_path) == before
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_an_existing_out_is_refused(llama_pair, tmp_path: Path, capsys) -> None:
    base, adapter = llama_pair
    (tmp_path / "out").mkdir()
    _refused((base, adapter, tmp_path / "out"), capsys, tmp_path, "already exists")


def test_an_out_inside_an_input_is_refused(llama_pair, tmp_path: Path, capsys) -> None:
    base, adapter = llama_pair
    _refused((base, adapter, base / "merged"), capsys, tmp_path, "inside the input")


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        (dict(use_dora=True), "DoRA"),
        (dict(modules_to_save=["lm_head"]), "whole trained modules"),
        (dict(lora_bias=True), "lora_bias"),
        (dict(init_lora_weights="pissa"), "changes the base weights when PEFT loads it"),
        (dict(init_lora_weights="olora"), "path_initial_model_for_weight_conversion"),
    ],
)
def test_unsupported_variants_are_refused(option: dict, needle: str, tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    fx.adapter(fx.model("llama"), tmp_path / "adapter", experts=False, **option)
    _refused((base, tmp_path / "adapter", tmp_path / "o"), capsys, tmp_path, needle)


def test_a_quantised_base_is_refused(llama_pair, tmp_path: Path, capsys) -> None:
    base, adapter = llama_pair
    config = json.loads((base / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (base / "config.json").write_text(json.dumps(config))
    _refused((base, adapter, tmp_path / "o"), capsys, tmp_path, "quantised (bitsandbytes)")


def test_an_adapter_whose_shapes_do_not_fit_the_base_is_refused(tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    fx.adapter(fx.model("qwen3"), tmp_path / "adapter")  # qwen3's q_proj is 64 -> 128 (head_dim 32)
    _refused((base, tmp_path / "adapter", tmp_path / "o"), capsys, tmp_path, "does not fit")


def test_a_pickle_only_adapter_is_refused(llama_pair, tmp_path: Path, capsys) -> None:
    base, adapter = llama_pair
    (adapter / "adapter_model.safetensors").rename(adapter / "adapter_model.bin")
    _refused((base, adapter, tmp_path / "o"), capsys, tmp_path, "pickle")


@pytest.mark.parametrize("damage", ["truncated header", "wrong lengths", "cut data"])
def test_a_corrupt_base_is_refused_before_any_work(damage: str, llama_pair, tmp_path: Path, capsys) -> None:
    base, adapter = llama_pair
    path = base / "model.safetensors"
    data = path.read_bytes()
    if damage == "truncated header":
        data = data[:20]
    elif damage == "wrong lengths":
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + n])
        name = next(k for k in header if k != "__metadata__")
        header[name]["data_offsets"][1] += 2
        raw = json.dumps(header).encode()
        data = len(raw).to_bytes(8, "little") + raw + data[8 + n :]
    else:
        data = data[:-100]
    path.write_bytes(data)
    _refused((base, adapter, tmp_path / "o"), capsys, tmp_path, "not a valid safetensors file")


def test_a_full_disk_leaves_nothing_behind(llama_pair, tmp_path: Path, capsys, monkeypatch) -> None:
    """A writer that fails part-way (ENOSPC, on the writer thread) leaves no partial folder and no output."""
    import errno

    from tuneproof.ship import tensors

    base, adapter = llama_pair
    real = tensors.ShardWriter.put
    calls = {"n": 0}

    def failing(self, name, piece):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, name, piece)

    monkeypatch.setattr(tensors.ShardWriter, "put", failing)
    _refused((base, adapter, tmp_path / "o"), capsys, tmp_path, "No space left on device")
    assert calls["n"] == 5


def test_the_merged_folder_gets_the_users_umask(llama_pair, tmp_path: Path) -> None:
    base, adapter = llama_pair
    old = os.umask(0o022)
    try:
        out = _merge(base, adapter, tmp_path / "out").out
    finally:
        os.umask(old)
    assert (out.stat().st_mode & 0o777) == 0o755


def test_a_plan_refuses_an_unknown_dtype(llama_pair, tmp_path: Path) -> None:
    base, adapter = llama_pair
    with pytest.raises(TuneproofError, match="dtype"):
        plan(base, adapter, tmp_path / "o", "int8")


def test_the_library_merge_refuses_a_mismatch_without_naming_a_flag(tmp_path: Path) -> None:
    from tuneproof.ship import fingerprint

    base = fx.save(fx.model("llama"), tmp_path / "base")
    other = fx.save(fx.model("llama", seed=9), tmp_path / "other")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    (tmp_path / "adapter" / "base_fingerprint.json").write_text(json.dumps(fingerprint(base).to_json()))
    with pytest.raises(TuneproofError) as e:
        m.run(m.prepare(m.MergeSpec(base=other, adapter_dir=tmp_path / "adapter", out=tmp_path / "out")))
    assert "allow_base_mismatch" in e.value.message and "--" not in e.value.message
    assert "broader change" in e.value.message  # the recorded base is here: the change is characterised
    spec = m.MergeSpec(
        base=other, adapter_dir=tmp_path / "adapter", out=tmp_path / "out", allow_base_mismatch=True
    )
    result = m.run(m.prepare(spec))
    assert result.identity.same is False and (tmp_path / "out" / "model.safetensors").is_file()


def test_side_files_are_copied_and_weights_in_other_formats_are_not(llama_pair, tmp_path: Path) -> None:
    base, adapter = llama_pair
    side = {
        "tokenizer.json": "{}",
        "tokenizer_config.json": "{}",
        "chat_template.jinja": "{{ x }}",
        "LICENSE": "ok",
    }
    for name, text in side.items():
        (base / name).write_text(text)
    (base / "pytorch_model.bin").write_bytes(b"pickle")  # stale extra weights: never copied next to the merge
    out = _merge(base, adapter, tmp_path / "out").out
    for name, text in side.items():
        assert (out / name).read_text() == text
    assert not (out / "pytorch_model.bin").exists()


def test_an_embedding_lora_merges_like_peft_and_its_stored_base_copy_is_checked(
    tmp_path: Path, capsys
) -> None:
    """PEFT saves the base embedding next to an embedding LoRA and loads it over the base: equal copies
    merge (as PEFT does), a differing copy (another vocabulary) is refused."""
    base = fx.save(fx.model("qwen3"), tmp_path / "base")
    peft_model = fx.adapter(
        fx.model("qwen3"), tmp_path / "adapter", target_modules=["embed_tokens", "q_proj"]
    )
    reference = fx.save(peft_model.merge_and_unload(), tmp_path / "peft")
    _merge(base, tmp_path / "adapter", tmp_path / "out")
    assert _max_diff(fx.tensors(reference), fx.tensors(tmp_path / "out")) <= 1e-6
    fx.adapter(fx.model("qwen3", seed=4), tmp_path / "other", target_modules=["embed_tokens", "q_proj"])
    _refused(
        (base, tmp_path / "other", tmp_path / "o"),
        capsys,
        tmp_path,
        "carries its own model.embed_tokens.weight",
    )


def test_a_partial_folder_left_by_a_killed_merge_is_pointed_out(llama_pair, tmp_path: Path, capsys) -> None:
    base, adapter = llama_pair
    (tmp_path / ".out.partial-abc123").mkdir()
    assert _cli_merge(base, adapter, tmp_path / "out") == 0
    assert ".out.partial-abc123 is left from an interrupted merge" in capsys.readouterr().err


def test_a_pissa_adapter_would_merge_wrong_so_it_is_refused(tmp_path: Path) -> None:
    """The trap: PEFT rebuilds the base as W - s * B0 @ A0 when it loads a PiSSA adapter, so W + s * B @ A
    on the original base is not PEFT's merge."""
    from peft import LoraConfig, get_peft_model

    base = fx.save(fx.model("llama"), tmp_path / "base")
    peft_model = get_peft_model(
        fx.model("llama"), LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights="pissa")
    )
    delta = peft_model.base_model.model.model.layers[0].self_attn.q_proj.get_delta_weight("default")
    naive = fx.tensors(base)["model.layers.0.self_attn.q_proj.weight"] + delta
    merged = peft_model.merge_and_unload().state_dict()["model.layers.0.self_attn.q_proj.weight"]
    assert float((merged - naive).abs().max()) > 1e-2


def test_an_fp16_merge_that_overflows_is_refused(tmp_path: Path, capsys) -> None:
    model = fx.model("llama")
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight[0, 0] = 1e5  # above fp16's 65,504
    base = fx.save(model, tmp_path / "base")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    _refused(
        (base, tmp_path / "adapter", tmp_path / "o", "--dtype", "fp16"), capsys, tmp_path, "overflows F16"
    )


def test_a_lora_on_a_tied_embedding_warns_and_on_a_tied_head_is_refused(tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("gemma2"), tmp_path / "base")  # Gemma ties the head to the embedding
    fx.adapter(fx.model("gemma2"), tmp_path / "emb", target_modules=["embed_tokens", "q_proj"])
    capsys.readouterr()
    assert _cli_merge(base, tmp_path / "emb", tmp_path / "out") == 0
    assert "is tied to the output head" in capsys.readouterr().err
    fx.adapter(fx.model("gemma2"), tmp_path / "head", target_modules=["lm_head", "q_proj"])
    _refused((base, tmp_path / "head", tmp_path / "o"), capsys, tmp_path, "ties to embed_tokens")


def test_a_changed_recorded_base_folder_is_not_used_to_characterise(tmp_path: Path, capsys) -> None:
    import shutil

    from tuneproof.ship import fingerprint

    base = fx.save(fx.model("llama"), tmp_path / "base")
    trained_on = fx.save(fx.model("llama", seed=3), tmp_path / "trained_on")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    (tmp_path / "adapter" / "base_fingerprint.json").write_text(json.dumps(fingerprint(trained_on).to_json()))
    shutil.rmtree(trained_on)
    shutil.copytree(base, trained_on)  # the recorded folder now holds another model
    capsys.readouterr()
    assert _cli_merge(base, tmp_path / "adapter", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "is not here unchanged to characterise the difference" in err and "rank" not in err


def test_merging_an_adapter_that_never_trained_warns_and_the_library_says_the_same(
    tmp_path: Path, capsys
) -> None:
    """An all-zero lora_B merges to the base's weights: `merge` said nothing. The warning is the
    library's (MergeResult.warnings), and `--json` prints the library's `to_dict()`."""
    base = fx.save(fx.model("llama"), tmp_path / "base")

    def zero_b(name: str, p: torch.Tensor) -> None:
        if "lora_B" in name:
            p.zero_()

    fx.adapter(fx.model("llama"), tmp_path / "adapter", fill=zero_b)
    result = m.run(m.prepare(m.MergeSpec(base=base, adapter_dir=tmp_path / "adapter", out=tmp_path / "lib")))
    assert any("NOT HEALTHY: 4 adapted modules never trained" in w for w in result.warnings)
    assert any("no base_fingerprint.json" in w for w in result.warnings)
    args = [
        "merge",
        "--base",
        str(base),
        "--adapter",
        str(tmp_path / "adapter"),
        "--out",
        str(tmp_path / "cli"),
    ]
    assert main([*args, "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    expected = {**result.to_dict(), "out": str(tmp_path / "cli")}
    assert data.pop("seconds").keys() == expected.pop("seconds").keys()  # this run's own times
    assert data == expected
    assert "warning: the adapter is NOT HEALTHY" in err


# --- one pass at the disk's speed (ship.stream) ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_streamed_merge_is_bit_identical_to_peft_loaded_the_usual_way(
    dtype: torch.dtype, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PEFT's default load (adapter weights in fp32 over a bf16 or fp16 base) merges W += B @ A * s, the
    sum in fp32 rounded once: the merge equals it bit for bit, through a ring small enough that the
    adapted tensors and the copied pieces wrap it many times."""
    from peft import PeftModel

    from tuneproof.ship import stream

    base = fx.save(fx.model("llama", dtype=dtype), tmp_path / "base", max_shard_size="40KB")
    fx.adapter(fx.model("llama"), tmp_path / "adapter", experts=False)
    monkeypatch.setattr(stream, "COPY_CHUNK", 4096)
    monkeypatch.setattr(stream, "ring_size", lambda jobs: 3 * 4096 + 2 * 64 * 64 * 4)
    result = _merge(base, tmp_path / "adapter", tmp_path / "out")
    peft = PeftModel.from_pretrained(fx.model("llama", dtype=dtype), tmp_path / "adapter").merge_and_unload()
    theirs = peft.state_dict()
    ours = fx.tensors(result.out)
    assert result.merged_tensors == 4 and set(ours) <= set(theirs)
    for name, tensor in ours.items():
        assert tensor.dtype == dtype and torch.equal(tensor, theirs[name]), name


def test_a_base_that_differs_stops_the_merge_at_the_first_differing_tensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fingerprint is taken from the bytes the merge reads: a differing tensor stops it there (no
    merge of the rest), then the refusal names every differing tensor, as before."""
    from tuneproof.ship import fingerprint
    from tuneproof.ship.merge_identity import IdentityCheck

    base = fx.save(fx.model("llama"), tmp_path / "base")
    edited = fx.model("llama")
    _abliterate(edited)
    fx.save(edited, tmp_path / "abliterated")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    (tmp_path / "adapter" / "base_fingerprint.json").write_text(json.dumps(fingerprint(base).to_json()))
    seen: list[str] = []
    real = IdentityCheck.seen
    monkeypatch.setattr(
        IdentityCheck, "seen", lambda self, info, h: (seen.append(info.name), real(self, info, h))
    )
    checkpoint = open_checkpoint(tmp_path / "abliterated")
    order = [i.name for i in sorted(checkpoint.tensors.values(), key=lambda t: t.begin)]
    first = next(i for i, n in enumerate(order) if n.endswith(("o_proj.weight", "down_proj.weight")))
    spec = m.MergeSpec(base=tmp_path / "abliterated", adapter_dir=tmp_path / "adapter", out=tmp_path / "out")
    with pytest.raises(TuneproofError, match="directional ablation"):
        m.run(m.prepare(spec))
    assert seen == order[: first + 1]
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial-*"))


def test_a_copied_tensor_that_overflows_fp16_is_refused(tmp_path: Path, capsys) -> None:
    model = fx.model("llama")
    with torch.no_grad():
        model.model.layers[0].self_attn.k_proj.weight[0, 0] = -1e5  # not adapted: cast, not merged
    base = fx.save(model, tmp_path / "base")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    _refused(
        (base, tmp_path / "adapter", tmp_path / "o", "--dtype", "fp16"),
        capsys,
        tmp_path,
        "model.layers.0.self_attn.k_proj.weight overflows F16: its largest value is 1e+05",
    )


def test_the_merge_gives_torch_its_threads_back(llama_pair, tmp_path: Path) -> None:
    base, adapter = llama_pair
    before = torch.get_num_threads()
    result = _merge(base, adapter, tmp_path / "out")
    assert torch.get_num_threads() == before
    assert result.timings is not None and {"read", "delta", "add and round", "write"} <= set(
        result.timings.busy
    )


def test_ctrl_c_in_the_middle_of_the_stream_leaves_nothing_and_no_thread(
    llama_pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from tuneproof.ship import merge_write

    base, adapter = llama_pair
    real = merge_write._Merger.change
    calls = {"n": 0}

    def interrupted(self, piece):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, piece)

    monkeypatch.setattr(merge_write._Merger, "change", interrupted)
    before = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        _merge(base, adapter, tmp_path / "out")
    assert threading.active_count() == before
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial-*"))


@pytest.mark.parametrize("family", fx.FAMILIES)
def test_a_bf16_merge_is_bit_identical_to_peft_in_every_family(family: str, tmp_path: Path) -> None:
    """Embeddings and fused experts too: PEFT rounds their delta to bf16 before adding it (its Embedding
    merge and ParamWrapper), a linear's it adds in fp32; the merge does each as PEFT does."""
    from peft import PeftModel

    base = fx.save(fx.model(family, dtype=torch.bfloat16), tmp_path / "base")
    fx.adapter(fx.model(family), tmp_path / "adapter", target_modules=["embed_tokens", "q_proj", "o_proj"])
    result = _merge(base, tmp_path / "adapter", tmp_path / "out")
    peft = PeftModel.from_pretrained(fx.model(family, dtype=torch.bfloat16), tmp_path / "adapter")
    theirs = fx.tensors(fx.save(peft.merge_and_unload(), tmp_path / "peft"))
    ours = fx.tensors(result.out)
    assert ours.keys() == theirs.keys()
    differ = [k for k in ours if not torch.equal(ours[k], theirs[k])]
    assert not differ, differ
    assert not torch.equal(ours["model.embed_tokens.weight"], fx.tensors(base)["model.embed_tokens.weight"])


def test_inf_or_nan_is_blamed_on_whoever_holds_it_and_never_hides_an_overflow(tmp_path: Path, capsys) -> None:
    """Found in review: a NaN already in the base was blamed on the adapter, and a NaN in a copied tensor
    let a neighbour's fp16 overflow through as inf."""
    model = fx.model("llama")
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight[0, 0] = float("nan")  # adapted
    base = fx.save(model, tmp_path / "base")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    _refused((base, tmp_path / "adapter", tmp_path / "o"), capsys, tmp_path, "the base's", "holds inf or NaN")
    model = fx.model("llama")
    with torch.no_grad():
        model.model.layers[0].self_attn.k_proj.weight[0, 0] = float("nan")  # copied, kept as it is
        model.model.layers[0].self_attn.k_proj.weight[0, 1] = 1e5  # but this overflows fp16
    base = fx.save(model, tmp_path / "base2")
    _refused(
        (base, tmp_path / "adapter", tmp_path / "o", "--dtype", "fp16"), capsys, tmp_path, "overflows F16"
    )


def test_a_base_that_cannot_be_read_is_said_to_be_the_reading(
    llama_pair, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from tuneproof.ship import stream

    def broken(*_: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(stream, "read_exact", broken)
    base, adapter = llama_pair
    _refused((base, adapter, tmp_path / "o"), capsys, tmp_path, "reading ", "failed: Input/output error")


SLOW_MERGE = """
import sys, time
from tuneproof.ship import tensors
real = tensors.ShardWriter.put
def slow(self, name, piece):  # a disk slow enough for a signal to land mid-stream
    time.sleep(0.02)
    return real(self, name, piece)
tensors.ShardWriter.put = slow
from tuneproof.cli.app import run
run()
"""


@pytest.mark.parametrize("signals", [["SIGTERM"], ["SIGINT", "SIGINT"]])
def test_a_signal_in_the_middle_of_the_stream_leaves_nothing_behind(
    signals: list[str], llama_pair, tmp_path: Path
) -> None:
    """Found by the fresh-eyes trial: SIGTERM (timeout, Slurm, docker stop) left the hidden partial
    folder every time, and a second Ctrl-C during the cleanup sometimes did, or printed a traceback."""
    import signal
    import subprocess
    import sys
    import time

    base, adapter = llama_pair
    out = tmp_path / "merged"
    args = ["merge", "--base", str(base), "--adapter", str(adapter), "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_MERGE, *args], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not any(p.glob("*.safetensors") for p in tmp_path.glob(".merged.partial-*")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.01)
    for name in signals:
        proc.send_signal(getattr(signal, name))
        time.sleep(0.01)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == (143 if signals == ["SIGTERM"] else 130), err
    assert err.strip() == ("error: terminated (SIGTERM)" if signals == ["SIGTERM"] else "error: interrupted")
    assert not out.exists() and not list(tmp_path.glob(".merged.partial-*"))


def test_a_damaged_recorded_fingerprint_says_what_to_do_with_it(llama_pair, tmp_path: Path, capsys) -> None:
    """Found by the fresh-eyes trials: the fix read 'pass a fingerprint file that tuneproof wrote', which
    merge takes no option for; then 'record it again', which fingerprint refuses while the old file is
    there; and lora check vouched for the damaged record."""
    base, adapter = llama_pair
    recorded = adapter / "base_fingerprint.json"
    recorded.write_text('{"format": "something else"}')
    fix = f"remove it, then record it again ('tuneproof fingerprint BASE --out FILE', FILE {recorded})"
    _refused((base, adapter, tmp_path / "o"), capsys, tmp_path, "is not a tuneproof fingerprint", fix)
    # and the adapter's check says so too, rather than vouching for the record
    capsys.readouterr()
    main(["lora", "check", str(adapter)])
    out = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "base_fingerprint.json cannot be used" in out and "merge refuses it; remove it" in out
