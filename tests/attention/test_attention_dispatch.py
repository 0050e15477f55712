"""The dispatch explainer: the CASE chain, live vs predicted on this CPU, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contexts import context
from tuneproof.arch import from_config, tiny_config_path
from tuneproof.attention.dispatch import explain, predict
from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError
from tuneproof.hardware.capability import parse_capability

CASE = Path(__file__).parent.parent.parent / "examples" / "gemma4-26b-a4b-like" / "config.json"


def test_case_chain_from_explain_json(capsys) -> None:
    args = [
        "explain",
        "--config",
        str(CASE),
        "--seq-len",
        "16384",
        "--batch",
        "2",
        "--padded",
        "--capability",
        "12.0",
        "--training",
        "--json",
    ]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    sliding, glob = d["layers"]
    assert (sliding["layer_type"], sliding["head_dim"], sliding["num_layers"]) == ("sliding", 256, 25)
    assert sliding["mask_materialised"] is True and "kv_length 16384 >= window 1024" in sliding["mask_reason"]
    assert "explicit attn_mask" in sliding["refused"]["flash"]
    assert "cuDNN first only on major 9 or 10 (capability 12.0)" in sliding["refused"]["cudnn"]
    assert sliding["backend"] == "efficient" and sliding["source"] == "predicted"
    assert (glob["layer_type"], glob["head_dim"], glob["num_layers"]) == ("full", 512, 5)
    assert glob["mask_materialised"] is True and "padded" in glob["mask_reason"]
    assert "head_dim 512 > 256" in glob["refused"]["flash"] and "attn_mask" in glob["refused"]["flash"]
    assert glob["backend"] == "efficient" and "gmem" in glob["kernel"] and "sm80" in glob["kernel"]
    advice = " ".join(d["advice"])
    assert "flex_attention with kernel_options" in advice and "'fwd_BLOCK_M': 32" in advice
    assert "bucket to avoid padding" in advice and "regain is_causal" in advice


def test_unpadded_global_layers_keep_is_causal_but_not_flash_at_512() -> None:
    shape = from_config(CASE)
    e = explain(shape, context(seq_len=16384, batch=2, training=True, capability=(12, 0)))
    glob = next(x for x in e.layers if x.layer_type == "full")
    assert not glob.mask_materialised and "head_dim 512 > 256" in glob.refused["flash"]
    assert glob.backend == "efficient"


def test_hopper_prefers_cudnn_when_head_dim_allows() -> None:
    shape = from_config(
        {
            "model_type": "llama",
            "hidden_size": 512,
            "intermediate_size": 1024,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "vocab_size": 128,
        }
    )
    e = explain(shape, context(seq_len=4096, batch=1, padded=True, capability=(9, 0)), live=False)
    assert e.layers[0].backend == "cudnn" and e.layers[0].refused == {}
    e = explain(shape, context(seq_len=4096, batch=1, capability=(8, 0)), live=False)
    assert e.layers[0].backend == "flash"


@pytest.mark.parametrize("seq_len,padded", [(64, False), (64, True), (128, False), (512, False), (512, True)])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_live_and_predicted_agree_on_this_cpu(seq_len: int, padded: bool, dtype: str) -> None:
    shape = from_config(tiny_config_path())  # sliding window 128
    ctx = context(seq_len=seq_len, batch=2, padded=padded, dtype=dtype, training=True)
    live = explain(shape, ctx, live=True)
    for layer in live.layers:
        assert layer.source == "live"
        spec = next(s.attention for s in shape.layers if s.attention.head_dim == layer.head_dim)
        mask, _, backend, _, _ = predict(ctx, spec)
        assert (layer.mask_materialised, layer.backend) == (mask, backend)


def test_flex_and_eager_paths() -> None:
    shape = from_config(CASE)
    flex = explain(shape, context(seq_len=16384, batch=2, attn="flex_attention", capability=(12, 0)))
    assert all(not x.mask_materialised and x.backend == "flex" for x in flex.layers)
    eager = explain(shape, context(seq_len=512, batch=2, attn="eager"))
    assert all(x.mask_materialised and x.backend == "eager" for x in eager.layers)


@pytest.mark.parametrize(
    "text,cap", [("12.0", (12, 0)), ("sm_120", (12, 0)), ("sm90", (9, 0)), ("8.6", (8, 6))]
)
def test_capability_strings(text: str, cap: tuple[int, int]) -> None:
    assert parse_capability(text) == cap


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--capability", "13.5"], "unknown --capability '13.5'"),
        (["--capability", "twelve"], "unknown --capability 'twelve'"),
        (["--capability", "9.0", "--gpu", "H100"], "--capability and --gpu together"),
        (["--batch", "0"], "--batch must be >= 1, got 0"),
        (["--dtype", "fp8"], "--dtype 'fp8' is not known"),
        (["--padded", "--packed"], "--padded and --packed together"),
        (["--attn", "xformers"], "--attn 'xformers' is not a known attention path"),
        (["--gpu", "Voodoo"], "unknown GPU 'Voodoo'"),
        (["--dropout", "1.5"], "--dropout must be < 1"),
        (["--dropout", "nan"], "--dropout must be a finite number"),
        (["--cudnn", "nine"], "--cudnn 'nine' is not a cuDNN version"),
        (["--cudnn", "7.6.5"], "--cudnn '7.6.5' is out of range"),
        (["--cuda", "latest"], "--cuda 'latest' is not a CUDA version"),
    ],
)
def test_bad_explain_input(capsys, args: list[str], fragment: str) -> None:
    assert main(["explain", "--seq-len", "128", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err


def test_gpu_name_gives_capability(capsys) -> None:
    assert (
        main(
            [
                "explain",
                "--config",
                str(CASE),
                "--seq-len",
                "2048",
                "--gpu",
                "NVIDIA H100 80GB HBM3",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["context"]["device"] == "cuda sm_90"


def test_flex_on_old_torch_is_refused(monkeypatch) -> None:
    import torch

    from tuneproof.attention.flex import require_flex

    monkeypatch.setattr(torch, "__version__", "2.5.1+cu124")
    with pytest.raises(TuneproofError, match=r"flex_attention needs torch >= 2\.6"):
        require_flex()


def test_unknown_capability_raises() -> None:
    with pytest.raises(TuneproofError):
        parse_capability("7.2")


def test_the_versions_the_answer_rests_on_are_named_and_can_be_given(capsys) -> None:
    """An answer for a card that is not here names what it assumed; given versions are used and said
    to be given; the config's attention dropout reaches the chooser in training."""
    args = ["explain", "--config", str(CASE), "--seq-len", "4096", "--capability", "9.0", "--json"]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["stack"]["cudnn"] == "9.23.1" and d["stack"]["cudnn_frontend_d256"] is True
    assert any(a.startswith("cudnn 9.23.1, what torch 2.13's CUDA wheels ship") for a in d["assumptions"])
    assert main([*args, "--cudnn", "9.10.2", "--cuda", "12.8"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["stack"]["sources"]["cudnn"] == "given: 9.10.2" and not any(
        a.startswith("cudnn") for a in d["assumptions"]
    )
    assert all(
        "not preferred: cuDNN first only above 9.15.0" in x["refused"].get("cudnn", "") for x in d["layers"]
    )
    assert main([*args, "--training", "--dropout", "0.1"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["context"]["sdpa_dropout"] == 0.1
    assert all("not a multiple of 1/16" in x["refused"]["cudnn"] for x in d["layers"])


def test_the_explanation_names_its_model_and_a_trace_without_a_config_is_warned(capsys) -> None:
    assert main(["explain", "--config", str(CASE), "--seq-len", "128", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == str(CASE)
    trace = str(Path(__file__).parents[1] / "data" / "case_sm120.json.gz")
    assert main(["explain", "--seq-len", "128", "--trace", trace]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("model: embedded tiny Gemma-4-style model\nattention dispatch on cuda sm_120")
    assert "--trace gives the card, not the model" in err


def test_the_model_line_is_never_wrapped_so_the_rest_does_not_depend_on_where_the_checkout_lives(
    capsys, monkeypatch, tmp_path
) -> None:
    """CI's clone lives at a longer path than this one: a wrapped header moved every break after it."""
    monkeypatch.setenv("COLUMNS", "100")
    outs = []
    for depth in (1, 12):
        folder = tmp_path.joinpath(*["deeper"] * depth)
        folder.mkdir(parents=True)
        (folder / "config.json").write_bytes(Path(CASE).read_bytes())
        assert main(["explain", "--config", str(folder / "config.json"), "--seq-len", "512"]) == 0
        first, rest = capsys.readouterr().out.split("\n", 1)
        assert first == f"model: {folder / 'config.json'}"
        outs.append(rest)
    assert outs[0] == outs[1]


CONFIGS = Path(__file__).parent.parent / "data" / "configs"


def test_advice_follows_the_answer() -> None:
    """After an expert's fresh-eyes trial: the advice never sends a layer somewhere worse, nor to a
    path that crashes, and a layer on math says why."""
    from tuneproof.arch import resolve
    from tuneproof.attention.dispatch import explain

    llama = resolve(CONFIGS / "llama-3.1-8b.json").shape
    padded = explain(llama, context(seq_len=4096, batch=4, padded=True, dtype="fp16", capability=(7, 5)))
    assert padded.layers[0].backend == "efficient" and padded.layers[0].kernel.startswith(
        "memory-efficient fmha_cutlassF_*_32x128_rf_sm75"
    )  # generate_kernels.py: 32x128 below sm80
    assert not any(a.startswith("bucket") for a in padded.advice)
    assert any(a.startswith("do not bucket the full layers off their mask") for a in padded.advice)
    assert not any("memory traffic grows" in a for a in padded.advice)
    plain = explain(llama, context(seq_len=4096, batch=4, dtype="fp16", capability=(7, 5)))
    assert plain.layers[0].backend == "math"
    assert any(
        a.startswith("the full layers (32) run SDPA's math backend") and "torch 2.14" in a
        for a in plain.advice
    )
    gemma = resolve(CASE).shape
    flex = explain(
        gemma,
        context(seq_len=4096, batch=1, attn="flex_attention", capability=(9, 0), training=True, dropout=0.1),
    )
    assert flex.advice[0].startswith(
        "flex_attention cannot run this training step: transformers' flex_attention raises"
    )
    assert all(x.kernel.startswith("none: transformers' flex_attention raises") for x in flex.layers)
    sdpa = explain(gemma, context(seq_len=4096, batch=1, capability=(9, 0), training=True, dropout=0.1))
    assert not any(a.startswith("use flex_attention") for a in sdpa.advice)
    mla_ctx = context(seq_len=4096, batch=1, capability=(9, 0), training=True, cudnn="9.10.2")
    mla = explain(resolve(CONFIGS / "deepseek-v3.json").shape, mla_ctx)
    assert mla.layers[0].backend == "efficient"
    assert any("flash needs equal head_dims (q/k 192, v 128)" in a for a in mla.advice)
    dense = explain(gemma, context(seq_len=512, batch=1, attn="flash_attention_2", capability=(9, 0)))
    assert all("flash_attn_func" in x.kernel for x in dense.layers)
    varlen = explain(
        gemma, context(seq_len=512, batch=2, padded=True, attn="flash_attention_2", capability=(9, 0))
    )
    assert all("flash_attn_varlen_func" in x.kernel for x in varlen.layers)


def test_flags_with_no_effect_are_warned_and_given_versions_are_shown(capsys) -> None:
    base = ["explain", "--seq-len", "512", "--capability", "9.0"]
    assert main([*base, "--attn", "eager", "--cudnn", "9.10.2", "--compiled"]) == 0
    err = capsys.readouterr().err
    assert "--cudnn has no effect without --attn sdpa" in err and "--compiled has no effect" in err
    assert main([*base, "--cuda", "12.8"]) == 0
    assert (
        "--cuda has no effect without a 9.x/10.x card of minor other than 0 or 3" in capsys.readouterr().err
    )
    assert main([*base, "--cudnn", "9.12"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "SDPA's chooser read: torch 2.13 (installed), CUDA 13.0 (assumed), cuDNN 9.12.0 (given)" in out
