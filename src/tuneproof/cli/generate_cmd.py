"""`tuneproof generate`: an arm file (R runs x N samples per prompt) for the gate, from a local model."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import check_out_file, command, count_bar, print_json, warn_unused

_FILE = click.Path(path_type=Path)


@command()
@click.option("--model", required=True, help="Local transformers model folder, or 'tiny' (random weights).")
@click.option("--adapter", default=None, help="PEFT adapter folder applied on top of --model.")
@click.option(
    "--prompts",
    type=_FILE,
    required=True,
    help='JSONL: {"prompt_id", "prompt"} or {"prompt_id", "messages"}.',
)
@click.option(
    "--runs",
    type=int,
    default=2,
    show_default=True,
    help="Independent runs (seed + r each); the gate needs >= 2.",
)
@click.option("--samples", type=int, default=4, show_default=True, help="Responses per prompt per run.")
@click.option(
    "--max-new-tokens", type=int, default=128, show_default=True, help="Tokens generated per response."
)
@click.option(
    "--temperature", type=float, default=1.0, show_default=True, help="Sampling temperature; 0 = greedy."
)
@click.option("--top-p", type=float, default=1.0, show_default=True, help="Nucleus sampling mass in (0, 1].")
@click.option("--batch-size", type=int, default=8, show_default=True, help="Prompts per generate call.")
@click.option("--seed", type=int, default=0, show_default=True, help="Run r samples with seed + r.")
@click.option("--out", type=_FILE, required=True, help="Arm JSONL to write (and ARM.meta.json beside it).")
@click.option("--json", "json_out", is_flag=True, help="Print the sidecar (meta) as JSON.")
def generate(
    model: str,
    adapter: str | None,
    prompts: Path,
    runs: int,
    samples: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    batch_size: int,
    seed: int,
    out: Path,
    json_out: bool,
) -> None:
    """Generate an arm for `tuneproof gate`: every prompt answered SAMPLES times in each of RUNS independent
    runs, with seeds recorded per row, and a sidecar ARM.meta.json (model and adapter paths, weight
    fingerprints, generation settings, package versions). Both files are written atomically."""
    import sys

    from tuneproof.gate.generate import GenerateSpec, check_paths, generate, meta_path, read_prompts

    spec = GenerateSpec(
        model=model,
        prompts=str(prompts),
        runs=runs,
        samples=samples,
        adapter=adapter,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        batch_size=batch_size,
        seed=seed,
    )
    check_paths(spec)
    warn_unused(("top_p",), "a temperature > 0 (greedy decoding ignores it)", temperature > 0)
    prompt_list = read_prompts(prompts)
    check_out_file(out, (prompts,))
    check_out_file(meta_path(out), (prompts,))
    with count_bar("generating") as update:
        rows, meta = generate(spec, prompt_list, update)
    import gzip
    import json

    from tuneproof.io import atomic_write_bytes, atomic_write_json

    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    atomic_write_bytes(out, gzip.compress(data, mtime=0) if out.suffix == ".gz" else data)
    atomic_write_json(meta_path(out), meta)
    if json_out:
        print_json(meta)
    else:
        seeds = meta["generation"]["seeds"]
        shape = f"{len(prompt_list)} prompts x {samples} samples x {runs} runs, seeds {seeds[0]}..{seeds[-1]}"
        print(f"wrote {len(rows)} responses ({shape}) to {out}, and {meta_path(out)}", file=sys.stdout)
