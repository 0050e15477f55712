"""torch.compile changes what transformers hands SDPA: every layer gets a mask. Shown live on the CPU (a
tiny Llama compiled with a backend that reads the traced graph's SDPA call) before the rule is tested:
the explainer and the FLOP ledger price a compiled model's global layers as masked, full square."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from contexts import context
from tiny_models import config_dict
from tuneproof.arch import resolve
from tuneproof.arch.shape import AttentionSpec
from tuneproof.attention.dispatch import predict
from tuneproof.flops import flop_report
from tuneproof.runs.step import Step

pytestmark = pytest.mark.slow  # dynamo traces the model


def _sdpa_calls(compiled: bool, **inputs: Any) -> list[dict[str, Any]]:
    """What scaled_dot_product_attention receives: read from the traced graph when compiled, from a
    wrapper of the function otherwise."""
    import torch
    import torch.nn.functional as F

    from tuneproof.measure.model import build_model

    model = build_model(resolve(config_dict("llama")), "sdpa").eval()
    ids = torch.randint(0, 200, (2, 32))
    calls: list[dict[str, Any]] = []
    if not compiled:
        real = F.scaled_dot_product_attention

        def spy(*args: Any, **kw: Any) -> Any:
            calls.append({"mask": kw.get("attn_mask") is not None, "is_causal": kw.get("is_causal")})
            return real(*args, **kw)

        F.scaled_dot_product_attention = spy
        try:
            with torch.no_grad():
                model(input_ids=ids, use_cache=False, **inputs)
        finally:
            F.scaled_dot_product_attention = real
        return calls

    def backend(gm: Any, example_inputs: Any) -> Any:
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target is F.scaled_dot_product_attention:
                calls.append(
                    {
                        "mask": node.kwargs.get("attn_mask") is not None,
                        "is_causal": node.kwargs.get("is_causal"),
                    }
                )
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(input_ids=ids, use_cache=False, **inputs)
    torch._dynamo.reset()
    return calls


def test_the_trap_is_real_a_compiled_model_masks_every_layer() -> None:
    eager = _sdpa_calls(False)
    assert eager and all(not c["mask"] and c["is_causal"] for c in eager)
    for inputs in ({}, {"attention_mask": __import__("torch").ones(2, 32, dtype=__import__("torch").long)}):
        compiled = _sdpa_calls(True, **inputs)
        assert compiled and all(c["mask"] and not c["is_causal"] for c in compiled)


def test_the_explainer_and_the_ledger_price_a_compiled_model_as_masked() -> None:
    spec = AttentionSpec(kind="full", window=None, num_heads=8, num_kv_heads=8, head_dim=128, v_head_dim=128)
    plain = predict(context(seq_len=4096, batch=1, capability=(8, 0)), spec)
    compiled = predict(context(seq_len=4096, batch=1, capability=(8, 0), compiled=True), spec)
    assert not plain.mask_materialised and plain.backend == "flash"
    assert compiled.mask_materialised and "compiled model" in compiled.mask_reason
    assert compiled.backend == "efficient" and "explicit attn_mask" in compiled.refused["flash"]
    shape = resolve(config_dict("llama")).shape
    step = Step(seq_len=1024, batch=1, attn="sdpa", mode="lora")
    eager_flops = flop_report(shape, step).performed.total
    compiled_flops = flop_report(shape, replace(step, compiled=True)).performed.total
    assert compiled_flops > eager_flops  # the causal half comes back as masked work
    assert (
        flop_report(shape, replace(step, compiled=True)).intended.total
        == flop_report(shape, step).intended.total
    )
