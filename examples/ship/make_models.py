"""Small models and adapters for trying `tuneproof lora check`, `fingerprint` and `merge` without a GPU
or a download (random weights, built by transformers and PEFT in a few seconds).

    .venv/bin/python examples/ship/make_models.py OUT_FOLDER

Writes into OUT_FOLDER:
- `base/`: a tiny Qwen3-MoE (4 experts, bf16), as a hub base would be;
- `abliterated/`: the same weights after a directional ablation (W - r r^T W on every o_proj and
  down_proj, experts included, and W - W r r^T on embed_tokens: Arditi et al. 2024);
- `adapter/`: a LoRA trained on `abliterated` (attention and fused experts, expert 2 of layer 1 never
  routed, so never moved), with `base_fingerprint.json` recorded from `abliterated`;
- `case-adapter/`: a rank-1 LoRA on the CASE model's 205 attention and dense-MLP linears (shapes only
  from its config, norms chosen so that the median lora_B norm is the CASE's 1.708).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).parent
CASE_CONFIG = HERE.parent / "gemma4-26b-a4b-like" / "config.json"
TINY_QWEN3_MOE = dict(
    hidden_size=64,
    intermediate_size=96,
    moe_intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_experts=4,
    num_experts_per_tok=2,
    mlp_only_layers=[0],
    vocab_size=256,
)


def _model() -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model("qwen3_moe", **TINY_QWEN3_MOE))
    return model.to(torch.bfloat16)


def _abliterate(model: torch.nn.Module) -> None:
    r = torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(7))
    r /= r.norm()
    with torch.no_grad():
        for name, p in model.named_parameters():
            w = p.float()
            if name.endswith(("o_proj.weight", "mlp.down_proj.weight")):
                p.copy_(w - torch.outer(r, r @ w))
            elif name.endswith("experts.down_proj"):  # (experts, hidden, intermediate): rows are the residual
                p.copy_(w - torch.einsum("h,k,ekj->ehj", r, r, w))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(w - torch.outer(w @ r, r))


def _adapter(base: torch.nn.Module, folder: Path) -> None:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=2,
        target_modules=["q_proj", "o_proj"],
        target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
    )
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)  # lora_A's kaiming init draws from the global RNG
        peft_model = get_peft_model(base.float(), config)
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
                if "layers.1.mlp.experts" in name:
                    p[:, 2::4] = 0  # expert 2 (columns j % 4 == 2) was never routed a token
    peft_model.save_pretrained(folder)


def _case_adapter(folder: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer
    from safetensors.torch import save_file

    from tuneproof.ship.layout import meta_model, read_config

    config = LoraConfig(
        r=1, lora_alpha=2, target_modules=r".*\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
    )
    peft_model = get_peft_model(meta_model(read_config(CASE_CONFIG)), config)
    layers = [(n, m) for n, m in peft_model.named_modules() if isinstance(m, LoraLayer)]
    norms = torch.linspace(1.0, 2.416, len(layers))  # 205 modules, median 1.708
    state = {}
    for (name, layer), norm in zip(layers, norms, strict=True):
        state[f"{name}.lora_A.weight"] = torch.full(tuple(layer.lora_A["default"].weight.shape), 0.01)
        b = torch.ones(tuple(layer.lora_B["default"].weight.shape))
        state[f"{name}.lora_B.weight"] = b / b.norm() * norm
    folder.mkdir(parents=True)
    save_file(state, folder / "adapter_model.safetensors")
    (folder / "adapter_config.json").write_text(
        json.dumps(
            {**config.to_dict(), "peft_type": "LORA", "target_modules": config.target_modules}, indent=2
        )
    )


def make(out: Path) -> None:
    from transformers.utils import logging

    from tuneproof.ship import fingerprint

    logging.disable_progress_bar()
    out.mkdir(parents=True, exist_ok=True)
    base = _model()
    base.save_pretrained(out / "base")
    _abliterate(base)
    base.save_pretrained(out / "abliterated")
    _adapter(base, out / "adapter")
    record = fingerprint(out / "abliterated").to_json()  # what the training integration records
    (out / "adapter" / "base_fingerprint.json").write_text(json.dumps(record, indent=2))
    _case_adapter(out / "case-adapter")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    target = Path(sys.argv[1])
    if target.exists() and any(target.iterdir()):  # never a half-overwritten demo folder
        sys.exit(f"error: {target} is not empty (pass a new folder, or remove this one first)")
    make(target)
    print(f"wrote base/, abliterated/, adapter/ and case-adapter/ in {sys.argv[1]}")
