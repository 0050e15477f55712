"""`tuneproof lora check`, `fingerprint`, `merge`, `quant-audit`: shipping an adapter safely.

Each reads files and headers only, needs no GPU and never modifies its inputs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from tuneproof.cli.common import PATH, Command, finish, json_option, terminal_progress, warn
from tuneproof.core.dtypes import MODEL_DTYPES

if TYPE_CHECKING:
    pass

_PATH = PATH


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def lora() -> None:
    """LoRA adapters: health before shipping."""


@lora.command(cls=Command)
@click.argument("adapter_dir", type=_PATH)
@click.option(
    "--base",
    type=_PATH,
    default=None,
    help="Base model folder (or its config.json): coverage, exact structure, and ||dW||/||W|| "
    "when it holds weights.",
)
@click.option(
    "--initial",
    type=_PATH,
    default=None,
    help="The adapter saved at step 0: judges inits that start B non-zero (PiSSA, OLoRA, LoftQ, ...).",
)
@json_option
def check(adapter_dir: Path, base: Path | None, initial: Path | None, json_out: bool) -> int:
    """Did every adapted module train? lora_B (lora_A for embeddings, B's columns j % E per expert)
    against zero, norms of A, B and scaling*B@A, coverage of the base's parameter families, and what a
    serving engine will do. Exit 0 healthy, 1 a module or expert never trained, 3 cannot judge."""
    from tuneproof.commands import lora

    spec = lora.CheckSpec(adapter_dir=adapter_dir, base=base, initial=initial, labels={"base": "--base"})
    return finish(lora.run(lora.prepare(spec)), json_out)


@click.command(cls=Command)
@click.argument("model_dir", type=_PATH, required=False)
@click.option(
    "--out",
    type=_PATH,
    default=None,
    help="Write the fingerprint JSON here (e.g. ADAPTER_DIR/base_fingerprint.json).",
)
@click.option(
    "--compare",
    nargs=2,
    type=_PATH,
    default=None,
    metavar="A B",
    help="Compare two model folders (or fingerprint files); exit 1 when they differ.",
)
@json_option
def fingerprint(
    model_dir: Path | None, out: Path | None, compare: tuple[Path, Path] | None, json_out: bool
) -> int:
    """Per-tensor sha256 of a model folder, streamed shard by shard (the model is never loaded), and
    one overall digest. With --compare: which tensors differ, the rank of each difference and whether
    one direction is shared across layers (directional ablation)."""
    from tuneproof.commands import fingerprint as f

    plan = f.prepare(f.FingerprintSpec(model_dir=model_dir, out=out, compare=compare))
    with terminal_progress() as progress:
        return finish(f.run(plan, progress), json_out)


@click.command(cls=Command)
@click.option("--base", type=_PATH, required=True, help="Base model folder (safetensors + config.json).")
@click.option("--adapter", type=_PATH, required=True, help="PEFT LoRA adapter folder.")
@click.option(
    "--out", type=_PATH, required=True, help="New folder for the merged model; an existing one is refused."
)
@click.option(
    "--dtype",
    type=click.Choice(list(MODEL_DTYPES)),
    default=None,
    help="Dtype of every float tensor (default: each keeps its stored dtype).",
)
@click.option(
    "--allow-base-mismatch",
    is_flag=True,
    help="Merge even when the base differs from the fingerprint recorded next to the adapter (loudly).",
)
@json_option
def merge(
    base: Path, adapter: Path, out: Path, dtype: str | None, allow_base_mismatch: bool, json_out: bool
) -> int:
    """Streaming merge: one tensor at a time, W + scaling*B@A in fp32 (per-expert einsum for fused
    experts), cast once; everything else copied as bytes. Checks the base's identity against
    ADAPTER/base_fingerprint.json first. Written to a temporary folder and renamed at the end."""
    from tuneproof.commands import merge as m

    merge_plan = m.prepare(
        m.MergeSpec(
            base=base, adapter_dir=adapter, out=out, dtype=dtype, allow_base_mismatch=allow_base_mismatch
        )
    )
    with terminal_progress() as progress:
        return finish(m.run(merge_plan, progress), json_out)


@click.command(name="quant-audit", cls=Command)
@click.option(
    "--recipe",
    type=_PATH,
    default=None,
    help="llm-compressor recipe (.yaml or .py, never run), compressed-tensors quantization_config "
    "JSON, or ModelOpt hf_quant_config.json.",
)
@click.option(
    "--config",
    type=_PATH,
    default=None,
    help="The model's config.json (or its folder, or a hub id in the local Hugging Face cache), "
    "for --recipe.",
)
@click.option(
    "--checkpoint",
    type=_PATH,
    default=None,
    help="A quantised checkpoint folder: audit what its headers hold.",
)
@click.option(
    "--engine",
    default=None,
    help="modelopt | llm-compressor | llm-compressor==X.Y.Z (default: the installed "
    "llm-compressor, else the engine that sees fused experts).",
)
@json_option
def quant_audit(
    recipe: Path | None, config: Path | None, checkpoint: Path | None, engine: str | None, json_out: bool
) -> int:
    """What a quantisation recipe will cover before quantising (matched against the model's module
    tree on the meta device with compressed-tensors' rules), or what a quantised checkpoint really
    stores. Exit 1 on a finding: a large family neither covered nor ignored."""
    from tuneproof.commands import quant_audit as qa

    audit_plan = qa.prepare(qa.AuditSpec(recipe=recipe, config=config, checkpoint=checkpoint, engine=engine))
    if checkpoint is not None and engine is not None:
        warn("--engine has no effect with --checkpoint (the checkpoint holds what the engine did)")
    return finish(qa.run(audit_plan), json_out)
