"""`tuneproof lora check`, `fingerprint`, `merge`, `quant-audit`: shipping an adapter safely.

Each reads files and headers only, needs no GPU and never modifies its inputs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tuneproof.cli.common import (
    Command,
    check_out_file,
    console,
    count_bar,
    json_option,
    print_json,
    warn,
    wrap_lines,
)
from tuneproof.errors import TuneproofError

if TYPE_CHECKING:
    from tuneproof.ship.identity import Fingerprint
    from tuneproof.ship.tensors import Checkpoint

_PATH = click.Path(path_type=Path)


def _print(lines: list[str]) -> None:
    out = console()
    for line in wrap_lines(lines, out.width):
        out.print(line, soft_wrap=True, markup=False)


def _mib_bar(update: Callable[[int, int], None], total: int) -> Callable[[int], None]:
    done = [0]

    def step(n: int) -> None:
        done[0] += n
        update(done[0] >> 20, total >> 20)

    return step


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
    from tuneproof.cli.ship_render import health_json, health_text
    from tuneproof.ship.health import check_adapter

    health = check_adapter(adapter_dir, base, initial)
    if json_out:
        print_json(health_json(health, adapter_dir, base))
    else:
        _print(health_text(health, adapter_dir, base))
    return health.verdict.exit_code


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
    from tuneproof.cli.ship_render import compare_json, compare_text, fingerprint_text
    from tuneproof.ship import identity as fp
    from tuneproof.ship.tensors import open_checkpoint

    if compare:
        if model_dir is not None or out is not None:
            raise TuneproofError(
                "--compare takes its two folders alone", "drop MODEL_DIR and --out, or drop --compare"
            )
        sides = [_side(p) for p in compare]
        diff = fp.compare(sides[0][0], sides[1][0])
        charac, why_not = None, None
        if diff.comparable and all(s[1] is not None for s in sides):
            a_ck, b_ck = sides[0][1], sides[1][1]
            assert a_ck is not None and b_ck is not None
            charac = fp.characterise(a_ck, b_ck, diff.comparable)
        elif diff.comparable:
            why_not = (
                "not characterised: a fingerprint file holds digests, not weights (compare two model folders)"
            )
        a, b = str(compare[0]), str(compare[1])
        if json_out:
            print_json(compare_json(a, b, diff, charac, why_not))
        else:
            _print(compare_text(a, b, diff, charac, why_not))
        return 0 if diff.identical else 1
    if model_dir is None:
        raise TuneproofError("no model folder given", "pass MODEL_DIR, or --compare A B")
    checkpoint = open_checkpoint(model_dir)
    if out is not None:
        if out.is_file():
            raise TuneproofError(
                f"{out} exists: a recorded fingerprint is never overwritten (a merge checks against it)",
                "remove it first if you mean to replace it, or pass another path",
            )
        check_out_file(out, tuple(s.path for s in checkpoint.shards))
    with count_bar("hashing MiB") as update:
        result = fp.fingerprint(checkpoint, _mib_bar(update, checkpoint.nbytes))
    result = fp.Fingerprint(result.digest, result.tensors, result.total_bytes, str(model_dir))
    if out is not None:
        from tuneproof.io import atomic_write_json

        atomic_write_json(out, result.to_json())
    if json_out:
        data = result.to_json()
        data["out"] = str(out) if out else None
        print_json(data)
    else:
        _print(fingerprint_text(result) + ([f"written   {out}"] if out else []))
    return 0


def _side(path: Path) -> tuple[Fingerprint, Checkpoint | None]:
    from tuneproof.ship import identity as fp
    from tuneproof.ship.tensors import open_checkpoint

    if path.is_file() and path.suffix == ".json":
        return fp.read_fingerprint(path), None
    checkpoint = open_checkpoint(path)
    with count_bar(f"hashing {path.name} MiB") as update:
        return fp.fingerprint(checkpoint, _mib_bar(update, checkpoint.nbytes)), checkpoint


@click.command(cls=Command)
@click.option("--base", type=_PATH, required=True, help="Base model folder (safetensors + config.json).")
@click.option("--adapter", type=_PATH, required=True, help="PEFT LoRA adapter folder.")
@click.option(
    "--out", type=_PATH, required=True, help="New folder for the merged model; an existing one is refused."
)
@click.option(
    "--dtype",
    type=click.Choice(["bf16", "fp16", "fp32"]),
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
) -> None:
    """Streaming merge: one tensor at a time, W + scaling*B@A in fp32 (per-expert einsum for fused
    experts), cast once; everything else copied as bytes. Checks the base's identity against
    ADAPTER/base_fingerprint.json first. Written to a temporary folder and renamed at the end."""
    from tuneproof.ship import merge as m

    _return_freed_memory()
    merge_plan = m.plan(base, adapter, out, dtype)
    with count_bar("checking base identity, MiB") as update:
        ident = m.identity(merge_plan.base, adapter, _mib_bar(update, merge_plan.base.nbytes))
    said = m.judge_identity(ident, allow_base_mismatch, adapter)
    with count_bar("merging MiB") as update:
        result = m.run(merge_plan, ident, _mib_bar(update, merge_plan.base.nbytes), said)
    for text in result.warnings:
        warn(text)
    data = result.to_dict()
    if json_out:
        print_json(data)
        return
    _print([
        f"merged    {result.modules} adapted modules into {result.merged_tensors} tensors (fp32, cast once); "
        f"{result.copied_tensors} tensors copied",
        f"base      identity {data['base_identity']}",
        f"written   {result.out} ({_size(result.bytes_written)} of weights, dtype {data['dtype']})",
    ])  # fmt: skip


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _return_freed_memory() -> None:
    """glibc raises its mmap threshold after each large free (up to 32 MiB), so the merge's freed
    per-tensor buffers stay in the heap and the peak creeps up by a few hundred MiB; a fixed 1 MiB
    threshold hands them back to the OS. A no-op where glibc is not the allocator."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "mallopt"):
            libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD (malloc.h)
    except OSError:
        pass


@click.command(name="quant-audit", cls=Command)
@click.option(
    "--recipe",
    type=_PATH,
    default=None,
    help="llm-compressor recipe (.yaml or .py, never run), compressed-tensors quantization_config "
    "JSON, or ModelOpt hf_quant_config.json.",
)
@click.option(
    "--config", type=_PATH, default=None, help="The model's config.json (or its folder), for --recipe."
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
    from tuneproof.cli.ship_render import checkpoint_json, checkpoint_text, recipe_json, recipe_text
    from tuneproof.ship import quant
    from tuneproof.ship.layout import read_config

    if checkpoint is not None:
        if recipe is not None or config is not None:
            raise TuneproofError(
                "--checkpoint audits a quantised model alone", "drop --recipe/--config, or drop --checkpoint"
            )
        if engine is not None:
            warn("--engine has no effect with --checkpoint (the checkpoint holds what the engine did)")
        from tuneproof.ship.tensors import open_checkpoint

        ck = open_checkpoint(checkpoint, "checkpoint")
        from tuneproof.arch import load_config_dict

        # only its quantization_config is read: a checkpoint's sizes are in its headers
        cfg = load_config_dict(checkpoint) if (checkpoint / "config.json").is_file() else None
        audit = quant.audit_checkpoint(ck, cfg, quant.read_modelopt(checkpoint))
        if json_out:
            print_json(checkpoint_json(checkpoint, audit))
        else:
            _print(checkpoint_text(checkpoint, audit))
        return 1 if audit.findings else 0
    from tuneproof.ship.recipe import read_recipe

    quant.engine(engine)  # a bad --engine is named before any file is read
    parsed = read_recipe(recipe) if recipe is not None else None
    cfg = read_config(config, "config") if config is not None else None
    if parsed is None or cfg is None or config is None:
        raise TuneproofError("nothing to audit", "pass --recipe FILE --config CONFIG, or --checkpoint DIR")
    assumed = quant.engine(engine, parsed)
    audits = [quant.audit_recipe(parsed, cfg, assumed)]
    if parsed.kind != "modelopt":
        alt = quant.audit_recipe(parsed, cfg, quant.other_view(assumed))
        if alt.family("experts").covered_matrices != audits[0].family("experts").covered_matrices:
            audits.append(alt)
    if json_out:
        print_json(recipe_json(parsed, audits, str(config)))
    else:
        _print(recipe_text(parsed, audits, str(config)))
    return 1 if audits[0].findings else 0
