"""Step's refusals, word for word (the CLI maps the field names to its flags), and how a padding share
spreads over the rows."""

from __future__ import annotations

import pytest

from tuneproof.core.errors import TuneproofError
from tuneproof.flops import Step

PAD_HINT = "(pass the share of token slots that are padding, e.g. 0.3)"


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"seq_len": "x"}, "seq_len must be an integer, got 'x' (pass the padded width in tokens)"),
        ({"seq_len": 0}, "seq_len must be >= 1, got 0 (pass the padded width in tokens)"),
        ({"batch": 0}, "batch must be >= 1, got 0 (pass sequences per micro-batch)"),
        ({"padding_fraction": 1.0}, f"padding_fraction must be < 1, got 1 {PAD_HINT}"),
        ({"padding_fraction": -0.1}, f"padding_fraction must be >= 0, got -0.1 {PAD_HINT}"),
        ({"padding_fraction": float("nan")}, f"padding_fraction must be a finite number, got nan {PAD_HINT}"),
        (
            {"attn": "xformers"},
            "attn 'xformers' is not a known attention path "
            "(use one of: eager, sdpa, flash_attention_2, flex_attention)",
        ),
        ({"mode": "qlora"}, "mode 'qlora' is not known (use one of: forward, full, lora)"),
        ({"lora_rank": 0}, "lora_rank must be >= 1, got 0 (pass the adapter rank r)"),
        ({"lora_rank": 2**21}, "lora_rank must be <= 1,048,576, got 2,097,152 (pass the adapter rank r)"),
        (
            {"lora_targets": "q_proj"},
            "lora_targets must be module names, got 'q_proj'"
            " (a tuple of nn.Linear names, e.g. ('q_proj', 'v_proj'))",
        ),
        (
            {"lora_targets": ("",)},
            "lora_targets must be module names, got ('',)"
            " (a tuple of nn.Linear names, e.g. ('q_proj', 'v_proj'))",
        ),
        (
            {"lora_targets": ()},
            "lora_targets is empty (give module names, all-linear, or lora_target_parameters)",
        ),
        ({"mode": "forward", "grad_ckpt": True}, "grad_ckpt needs a backward pass (use mode full or lora)"),
        (
            {"padding_fraction": 0.3, "lengths": (4,)},
            "padding_fraction and lengths together (give real lengths or a padding share, not both)",
        ),
        (
            {"padding_fraction": 0.3, "documents": ((4,),)},
            "padding_fraction and documents together (give real lengths or a padding share, not both)",
        ),
        (
            {"lengths": (4,), "documents": ((4,),)},
            "lengths and documents together (documents already fix each row's length)",
        ),
        ({"batch": 2, "lengths": (4,)}, "batch is 2 but 1 rows of lengths were given"),
        ({"batch": 2, "documents": ((4,),)}, "batch is 2 but 1 rows of documents were given"),
        ({"lengths": (9,)}, "lengths must be <= 8, got 9"),
        ({"lengths": (0,)}, "lengths must be >= 1, got 0"),
        ({"documents": ((9,),)}, "documents must be <= 8, got 9"),
    ],
)
def test_runspec_refusals(kw: dict, message: str) -> None:
    with pytest.raises(TuneproofError) as e:
        Step(**{"seq_len": 8, **kw})
    assert e.value.message == message


@pytest.mark.parametrize(
    "fraction,lengths",
    [(0.0, [10, 10, 10]), (0.5, [5, 5, 5]), (0.4, [6, 6, 6]), (0.45, [6, 5, 5]), (0.99, [1, 1, 1])],
)
def test_a_padding_share_spreads_evenly_and_keeps_a_token_per_row(
    fraction: float, lengths: list[int]
) -> None:
    run = Step(seq_len=10, batch=3, padding_fraction=fraction)
    assert run.real_lengths == lengths
    assert run.padded_tokens == 30 and run.real_tokens == sum(lengths)


def test_given_lengths_and_documents_make_the_rows() -> None:
    assert Step(seq_len=8, batch=2, lengths=(3, 8)).real_lengths == [3, 8]
    packed = Step(seq_len=8, batch=2, documents=((3, 5), (2,)))
    assert packed.rows.docs == ((3, 5), (2,)) and packed.real_lengths == [8, 2]
