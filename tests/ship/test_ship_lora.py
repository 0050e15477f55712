"""`tuneproof lora check`: untrained modules, embeddings judged on A, idle experts by j % E, non-zero
inits, coverage, the CASE line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import ship_fakes as fx
from tuneproof.cli.app import main
from tuneproof.ship.health import check_adapter as check

CASE_CONFIG = Path(__file__).parent.parent.parent / "examples" / "gemma4-26b-a4b-like" / "config.json"


def _zero_first_q_b(name: str, p: torch.Tensor) -> None:
    if "layers.0.self_attn.q_proj.lora_B" in name:
        p.zero_()


@pytest.mark.parametrize("family", fx.FAMILIES)
def test_one_module_with_b_zeroed_is_found(family: str, tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model(family), tmp_path / "base")
    fx.adapter(fx.model(family), tmp_path / "adapter", fill=_zero_first_q_b)
    health = check(tmp_path / "adapter", base)
    assert [m.path for m in health.untrained] == ["base_model.model.model.layers.0.self_attn.q_proj"]
    assert health.idle_expert_count == 0
    assert main(["lora", "check", str(tmp_path / "adapter")]) == 1
    out = capsys.readouterr().out
    assert "never trained: base_model.model.model.layers.0.self_attn.q_proj" in out
    assert f"lora_B non-zero in {len(health.modules) - 1} of {len(health.modules)} adapted modules" in out


def test_a_healthy_adapter_exits_0_and_prints_norms_and_ratios(tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    assert main(["lora", "check", str(tmp_path / "adapter"), "--base", str(base)]) == 0
    out = capsys.readouterr().out
    assert "HEALTHY" in out and "median ||delta W|| / ||W||" in out
    assert main(["lora", "check", str(tmp_path / "adapter"), "--base", str(base), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    q = next(m for m in data["modules"] if m["path"].endswith("layers.0.self_attn.q_proj"))
    # the ratio is computed from the real tensors: ||scaling * B @ A|| / ||W||
    from peft import PeftModel

    peft_model = PeftModel.from_pretrained(fx.model("llama"), tmp_path / "adapter")
    layer = peft_model.base_model.model.model.layers[0].self_attn.q_proj
    want_delta = float(layer.get_delta_weight("default").norm())
    assert q["delta_norm"] == pytest.approx(want_delta, rel=1e-5)
    assert q["relative"] == pytest.approx(want_delta / float(layer.base_layer.weight.norm()), rel=1e-5)


def test_an_embedding_lora_is_judged_on_a(tmp_path: Path) -> None:
    def zero_embedding_a(name: str, p: torch.Tensor) -> None:
        if "lora_embedding_A" in name:
            p.zero_()

    fx.adapter(
        fx.model("llama"),
        tmp_path / "adapter",
        target_modules=["embed_tokens", "q_proj"],
        fill=zero_embedding_a,
    )
    health = check(tmp_path / "adapter")
    emb = next(m for m in health.modules if m.kind == "embedding")
    assert (
        emb.judged_on == "A" and emb.trained is False and emb.b_norm > 0
    )  # B is random at init: not the signal
    assert [m.path for m in health.untrained] == [emb.path]
    # and a trained embedding LoRA (A non-zero) is healthy even though its B is the untouched init
    fx.adapter(fx.model("llama"), tmp_path / "ok", target_modules=["embed_tokens", "q_proj"])
    assert check(tmp_path / "ok").healthy


@pytest.mark.parametrize("family", sorted(fx.EXPERT_PARAMS))
def test_one_expert_with_its_b_columns_zeroed_is_reported_exactly(family: str, tmp_path: Path) -> None:
    """Expert e owns B's columns j with j % E == e (PEFT ParamWrapper); zero expert 1's of the first
    wrapper found, and only expert 1 of that one module is reported."""
    hit: list[str] = []

    def zero_expert_1(name: str, p: torch.Tensor) -> None:
        if "experts" in name and "lora_B" in name and not hit:
            hit.append(name)
            p[:, 1::4] = 0  # E = 4 in every tiny MoE config

    base = fx.save(fx.model(family), tmp_path / "base")
    fx.adapter(fx.model(family), tmp_path / "adapter", fill=zero_expert_1)
    health = check(tmp_path / "adapter", base)
    idle = [(m.path, m.idle_experts) for m in health.modules if m.idle_experts]
    module = hit[0].removesuffix(".lora_B.default.weight")
    assert idle == [(module, (1,))]
    assert not health.untrained and health.healthy is False


def test_contiguous_blocks_would_name_the_wrong_experts(tmp_path: Path) -> None:
    """The trap: zeroing columns 2:4 (a contiguous block) moves experts 2 and 3 only partly; read by
    j % E, every expert still has a non-zero column, so none is reported idle."""

    def zero_block(name: str, p: torch.Tensor) -> None:
        if "experts" in name and "lora_B" in name:
            p[:, 2:4] = 0

    fx.adapter(fx.model("qwen3_moe"), tmp_path / "adapter", fill=zero_block)
    assert check(tmp_path / "adapter").idle_expert_count == 0


def test_a_pissa_adapter_cannot_be_judged_without_initial_and_is_judged_with_it(
    tmp_path: Path, capsys
) -> None:
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(
        fx.model("llama"), LoraConfig(r=2, target_modules=["q_proj", "o_proj"], init_lora_weights="pissa")
    )
    peft_model.save_pretrained(tmp_path / "initial")
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name and "layers.1" not in name:
                p.add_(0.01)  # "training" moved layer 0 only
    peft_model.save_pretrained(tmp_path / "trained")
    assert main(["lora", "check", str(tmp_path / "trained")]) == 3
    out = " ".join(capsys.readouterr().out.split())  # lines wrap at 80 columns
    assert "judge it against the adapter saved at step 0" in out and "CANNOT JUDGE" in out
    assert main(["lora", "check", str(tmp_path / "trained"), "--initial", str(tmp_path / "initial")]) == 1
    out = capsys.readouterr().out
    assert "moved from the initial adapter in 2 of 4 adapted modules" in out
    assert "never trained: base_model.model.model.layers.1.self_attn.o_proj" in out


def test_an_initial_adapter_of_another_shape_is_refused(tmp_path: Path, capsys) -> None:
    fx.adapter(fx.model("llama"), tmp_path / "a", init_lora_weights=False)
    fx.adapter(fx.model("llama"), tmp_path / "b", r=4, init_lora_weights=False)
    assert main(["lora", "check", str(tmp_path / "a"), "--initial", str(tmp_path / "b")]) == 2
    assert "does not match the adapter" in capsys.readouterr().err


def test_coverage_and_the_serving_note_for_fused_experts(tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("qwen3_moe"), tmp_path / "base")
    fx.adapter(fx.model("qwen3_moe"), tmp_path / "attn_only", experts=False)
    assert main(["lora", "check", str(tmp_path / "attn_only"), "--base", str(base / "config.json")]) == 0
    out = capsys.readouterr().out
    assert "experts             0 of 12" in out  # 1 MoE layer x 4 experts x 3 projections
    assert "merge before serving" not in out
    fx.adapter(fx.model("qwen3_moe"), tmp_path / "experts")
    main(["lora", "check", str(tmp_path / "experts"), "--base", str(base)])
    out = capsys.readouterr().out
    assert "experts            12 of 12" in out and "merge before serving" in out and "vllm #41754" in out


def _case_adapter(folder: Path) -> None:
    """The demo's rank-1 LoRA on the CASE model's 205 attention and MLP linears (median lora_B 1.708)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_models", CASE_CONFIG.parents[1] / "ship" / "make_models.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module._case_adapter(folder)


def test_the_case_line(tmp_path: Path, capsys) -> None:
    _case_adapter(tmp_path / "adapter")
    assert main(["lora", "check", str(tmp_path / "adapter"), "--base", str(CASE_CONFIG)]) == 0
    out = capsys.readouterr().out
    assert "lora_B non-zero in 205 of 205 adapted modules, median norm 1.708" in out
    assert "experts             0 of 11,520" in out
    assert "attention         115 of 115" in out and "dense MLP          90 of 90" in out


def test_an_adapter_folder_without_weights_or_config_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["lora", "check", str(tmp_path / "empty")]) == 2
    assert "has no adapter_config.json" in capsys.readouterr().err
    fx.adapter(fx.model("llama"), tmp_path / "a")
    (tmp_path / "a" / "adapter_model.safetensors").unlink()
    assert main(["lora", "check", str(tmp_path / "a")]) == 2
    assert "has no adapter_model.safetensors" in capsys.readouterr().err


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("lora_bad")
    fx.save(fx.model("llama"), d / "base")
    fx.adapter(fx.model("llama"), d / "adapter")
    fx.adapter(fx.model("qwen3"), d / "other")
    (d / "not-json").mkdir()
    (d / "not-json" / "config.json").write_text("{nope")
    (d / "file").write_text("x")
    return d


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["missing"], "is not a folder"),
        (["file"], "is not a folder"),
        (["base"], "has no adapter_config.json"),
        (["adapter", "--base", "missing"], "does not exist"),
        (["adapter", "--base", "not-json"], "not valid JSON"),
        (["adapter", "--base", "file"], "not valid JSON"),
        (["other", "--base", "base"], "does not fit this base"),
        (["adapter", "--initial", "missing"], "is not a folder"),
        (["adapter", "--initial", "other"], "does not match the adapter"),
    ],
)
def test_every_lora_check_option_refuses_bad_values(pair: Path, args: list[str], needle: str, capsys) -> None:
    before = fx.snapshot(pair)
    argv = [str(pair / a) if not a.startswith("--") else a for a in args]
    assert main(["lora", "check", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err, err
    assert fx.snapshot(pair) == before


def test_scaling_read_from_the_config_alone_matches_peft(tmp_path: Path) -> None:
    """Without --base, rank_pattern / alpha_pattern / rsLoRA are applied as PEFT's get_pattern_key does."""
    base = fx.save(fx.model("llama"), tmp_path / "base")
    fx.adapter(
        fx.model("llama"), tmp_path / "adapter", experts=False, use_rslora=True,
        rank_pattern={"q_proj": 4}, alpha_pattern={"layers.1.self_attn.o_proj": 32},
    )  # fmt: skip
    alone = {m.path: m.scaling for m in check(tmp_path / "adapter").modules}
    resolved = {m.path: m.scaling for m in check(tmp_path / "adapter", base).modules}
    assert alone == pytest.approx(resolved)
    assert len(set(alone.values())) == 3  # q_proj (r=4), layer 1 o_proj (alpha 32), layer 0 o_proj


def test_the_base_identity_line_says_whether_a_fingerprint_is_recorded(tmp_path: Path, capsys) -> None:
    base = fx.save(fx.model("llama"), tmp_path / "base")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    main(["lora", "check", str(tmp_path / "adapter")])
    assert "no base_fingerprint.json: record the base's with 'tuneproof fingerprint BASE" in " ".join(
        capsys.readouterr().out.split()
    )
    main(["fingerprint", str(base), "--out", str(tmp_path / "adapter" / "base_fingerprint.json")])
    capsys.readouterr()
    main(["lora", "check", str(tmp_path / "adapter"), "--json"])
    assert json.loads(capsys.readouterr().out)["base_fingerprint_recorded"] is True


def test_nan_in_an_adapter_is_not_healthy(tmp_path: Path, capsys) -> None:
    def poison(name: str, p: torch.Tensor) -> None:
        if "layers.1.self_attn.q_proj.lora_B" in name:
            p[0, 0] = float("nan")

    fx.adapter(fx.model("llama"), tmp_path / "adapter", fill=poison)
    assert main(["lora", "check", str(tmp_path / "adapter")]) == 1
    out = " ".join(capsys.readouterr().out.split())  # lines wrap at 80 columns
    assert "1 modules hold NaN or inf" in out and "NaN or inf in: base_model.model.model.layers.1" in out
    assert main(["lora", "check", str(tmp_path / "adapter"), "--json"]) == 1
    bad = [m for m in json.loads(capsys.readouterr().out)["modules"] if not m["finite"]]
    assert len(bad) == 1 and bad[0]["b_norm"] is None  # unknown, with "finite": false as the reason


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        ({"r": 2.5}, "r is 2.5"),
        ({"r": "abc"}, "r is 'abc'"),
        ({"lora_alpha": float("nan")}, "lora_alpha is nan"),
        ({"rank_pattern": {"q_proj": "z"}}, "rank_pattern['q_proj'] is 'z'"),
        ({"alpha_pattern": {"(": 4}}, "is not a regex"),
        ({"target_modules": None, "target_parameters": None}, "names no target_modules"),
        ({"peft_type": "IA3"}, "not LoRA"),
    ],
)
def test_a_bad_adapter_config_is_refused(edit: dict, needle: str, tmp_path: Path, capsys) -> None:
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    path = tmp_path / "adapter" / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
    assert main(["lora", "check", str(tmp_path / "adapter")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path, capsys, monkeypatch) -> None:
    from tuneproof.commands import lora

    def interrupted(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    monkeypatch.setattr(lora, "check_adapter", interrupted)
    assert main(["lora", "check", str(tmp_path)]) == 130
    assert capsys.readouterr().err == "error: interrupted\n"


def test_lora_check_with_a_base_folder_names_it(tmp_path: Path, capsys) -> None:
    """`lora check --base DIR` said "no base named" beside the base it was given."""
    base = fx.save(fx.model("llama"), tmp_path / "base")
    fx.adapter(fx.model("llama"), tmp_path / "adapter")
    assert main(["lora", "check", str(tmp_path / "adapter"), "--base", str(base)]) == 0
    printed = capsys.readouterr().out
    # lines wrap at 80 columns (they ran to 267); only a word longer than that (a tmp path) stays whole
    assert all(len(line) <= 80 or str(tmp_path) in line for line in printed.splitlines())
    out = " ".join(printed.split())
    identity = out[out.index("identity ") : out.index("verdict ")]
    assert "no base named" not in identity and f"--base {base} gave the structure" in identity


def test_a_rank_above_the_matrix_width_is_not_healthy(tmp_path: Path, capsys) -> None:
    """Issue 35: a rank-256 adapter on a 64-wide layer was called HEALTHY. B @ A has rank at most
    min(in, out); PEFT builds and trains the wider factors without a word."""
    base = fx.model("llama")
    width = min(base.config.hidden_size, base.config.num_attention_heads * base.config.head_dim)
    fx.adapter(fx.model("llama"), tmp_path / "adapter", r=4 * width, experts=False)
    assert main(["lora", "check", str(tmp_path / "adapter"), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert (
        data["verdict"].startswith("NOT HEALTHY")
        and "have a rank above their matrix's smaller side" in data["verdict"]
    )
    q = next(m for m in data["modules"] if m["path"].endswith("layers.0.self_attn.q_proj"))
    assert q["width"] == width and q["rank_above_width"] is True
    fx.adapter(fx.model("llama"), tmp_path / "fits", r=width, experts=False)
    assert main(["lora", "check", str(tmp_path / "fits")]) == 0  # a rank equal to the width is whole


def test_a_rank_above_the_width_is_said_even_where_training_cannot_be_judged(tmp_path: Path, capsys) -> None:
    """The fresh-eyes trial: with init_lora_weights=False the verdict was CANNOT JUDGE (exit 3), the
    rank above the width unsaid. It is structural, so it is a finding either way."""
    base = fx.model("llama")
    width = min(base.config.hidden_size, base.config.num_attention_heads * base.config.head_dim)
    fx.adapter(fx.model("llama"), tmp_path / "a", r=4 * width, experts=False, init_lora_weights=False)
    assert main(["lora", "check", str(tmp_path / "a"), "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)["verdict"]
    assert verdict.startswith("NOT HEALTHY: whether it trained cannot be judged")
    assert "have a rank above their matrix's smaller side" in verdict
