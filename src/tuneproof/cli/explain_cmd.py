"""`tuneproof explain`: which attention kernel each layer gets, and why."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.attention.paths import names
from tuneproof.cli.common import (
    PATH,
    command,
    config_option,
    finish,
    json_option,
    warn,
    warn_unused,
    with_model,
)


@command()
@config_option
@click.option("--seq-len", type=int, required=True, help="Padded width T, tokens.")
@click.option("--batch", type=int, default=1, show_default=True, help="Sequences per micro-batch.")
@click.option("--padded", is_flag=True, help="The batch holds padding (any sequence shorter than T).")
@click.option(
    "--packed", is_flag=True, help="Documents packed into rows (position_ids restart, no 2-D mask)."
)
@click.option(
    "--live",
    is_flag=True,
    help="With --packed: build a small copy of the model (every layer kind, random weights) on --attn and "
    "run one packed row packed and document by document: do the documents stay apart?",
)
@click.option("--attn", default="sdpa", show_default=True, help=", ".join(names()) + ".")
@click.option("--dtype", default="bf16", show_default=True, help="bf16, fp16 or fp32.")
@click.option("--training", is_flag=True, help="Tensors require grad (training step), not inference.")
@click.option(
    "--dropout",
    type=float,
    default=None,
    help="Attention dropout probability SDPA gets in training [default: the config's attention_dropout].",
)
@click.option(
    "--compiled",
    is_flag=True,
    help="The model runs under torch.compile (transformers then builds every mask).",
)
@click.option(
    "--cudnn",
    default=None,
    help="Runtime cuDNN version, e.g. 9.23.1 [default: the device's; else what the installed torch ships].",
)
@click.option(
    "--cuda",
    default=None,
    help="CUDA build of torch, e.g. 12.8 [default: the device's; else torch's default].",
)
@click.option(
    "--capability", default=None, help="CUDA compute capability to explain for, e.g. 12.0 or sm_90."
)
@click.option(
    "--gpu",
    default=None,
    help="GPU name (capability from the hardware table), e.g. 'RTX PRO 6000 Blackwell'; auto: this device.",
)
@click.option(
    "--trace",
    type=PATH,
    default=None,
    help="A torch.profiler trace: explain for the CUDA device it ran on (its capability and "
    "sharedMemPerBlockOptin).",
)
@json_option
def explain(
    config: str,
    seq_len: int,
    batch: int,
    padded: bool,
    packed: bool,
    live: bool,
    attn: str,
    dtype: str,
    training: bool,
    dropout: float | None,
    compiled: bool,
    cudnn: str | None,
    cuda: str | None,
    capability: str | None,
    gpu: str | None,
    trace: Path | None,
    json_out: bool,
) -> int:
    """Per attention layer type: is a mask materialised, which SDPA backend runs, what each refusal was."""
    from tuneproof.attention.dispatch import Context
    from tuneproof.commands.explain import ExplainSpec, prepare, run
    from tuneproof.hardware.card import card
    from tuneproof.runs.run import Run

    target = card(gpu, capability=capability, trace=trace)
    if trace is not None and config == "tiny":
        warn("--trace gives the card, not the model: the embedded tiny model is explained; pass --config")
    warn_unused(
        ("cudnn", "cuda"), "a CUDA card (--capability, --gpu or --trace)", target.capability is not None
    )
    warn_unused(("cudnn", "cuda", "compiled"), "--attn sdpa (they change SDPA's choice only)", attn == "sdpa")
    cap = target.capability
    minor_rule = cap is not None and cap[0] in (9, 10) and cap[1] not in (0, 3)
    if cap is not None:  # the CUDA build decides only a 9.x/10.x part's cuDNN preference off minors 0 and 3
        warn_unused(
            ("cuda",), "a 9.x/10.x card of minor other than 0 or 3 (the only CUDA-build rule)", minor_rule
        )
    warn_unused(("dropout",), "--training (the attention gets its dropout in training only)", training)
    flags = Run.of_flags(
        attn=attn, mode="full" if training else "forward", seq_len=seq_len, micro_batch=batch,
        torch_compile=compiled,
    )  # fmt: skip
    step = flags.step(padded=padded, packed=packed)
    ctx = Context(step=step, card=target, dtype=dtype, dropout=dropout, cudnn=cudnn, cuda=cuda)
    spec = ExplainSpec(model=config, context=ctx, live=live)
    return finish(run(prepare(with_model(spec))), json_out)
