"""Text and JSON of the shipping results (`lora check`, `fingerprint`, `merge`, `quant-audit`): every
number with its basis, every verdict with its reason. Each result's `render(console)` and `to_dict()`
(exactly what `--json` prints) are the functions here."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from tuneproof.ship.identity import CAST

if TYPE_CHECKING:
    from tuneproof.ship.comparison import FingerprintComparison
    from tuneproof.ship.health import Health
    from tuneproof.ship.merge_write import MergeResult

LIST_LIMIT = 10
RECORD_ADVICE = "'tuneproof fingerprint BASE --out FILE'"  # another command, named as advice


def print_lines(console: Any, lines: list[str]) -> None:
    """Report lines on the console, wrapped at its width (`tuneproof.core.terminal.wrap_lines`), never
    read as markup."""
    from tuneproof.core.terminal import wrap_lines

    for line in wrap_lines(lines, console.width):
        console.print(line, soft_wrap=True, markup=False)


def _clip(names: list[str], limit: int = LIST_LIMIT) -> list[str]:
    return names[:limit] + (
        [f"... and {len(names) - limit} more (--json lists all)"] if len(names) > limit else []
    )


# --- lora check -----------------------------------------------------------------------------------------


def health_lines(h: Health) -> list[str]:
    """`base` is named as `h.labels` says (the command's flag), bare for a library caller."""
    flag = h.labels.get("base", "base")
    lines = [
        f"adapter   {h.adapter_dir}",
        "structure "
        + (
            f"resolved by PEFT against {h.base}"
            if h.resolved_with_base
            else f"read from adapter_config.json alone (pass {flag} for the exact parameters)"
        ),
        f"init      init_lora_weights={h.init!r}; judged on "
        + ", ".join(sorted({m.judged_on for m in h.modules})).replace("none", "nothing (cannot judge)"),
        f"health    {h.summary()}",
    ]
    for path in _clip([m.path for m in h.untrained]):
        lines.append(f"  never trained: {path}")
    idle = [m for m in h.modules if m.idle_experts and m.trained is not False]
    for m in idle[:LIST_LIMIT]:
        shown = ", ".join(map(str, m.idle_experts[:16])) + (" ..." if len(m.idle_experts) > 16 else "")
        where = m.target or m.path
        lines.append(f"  experts never moved: {len(m.idle_experts)} of {m.num_experts} in {where}: [{shown}]")
    for path in _clip([m.path for m in h.not_finite]):
        lines.append(f"  NaN or inf in: {path}")
    deltas = [m.delta_norm for m in h.modules if m.finite] or [float("nan")]
    rel = [m.relative for m in h.modules if m.relative is not None and m.finite]
    line = f"change    median ||scaling * B @ A|| {statistics.median(deltas):.4g}"
    if rel:
        spread = f"(min {min(rel):.3g}, max {max(rel):.3g})"
        line += f"; median ||delta W|| / ||W|| {statistics.median(rel):.3g} {spread}"
    else:
        line += f"; ||delta W|| / ||W|| unknown (pass {flag} as a model folder holding the weights)"
    return [*lines, line, *_health_tail(h, flag)]


def _health_tail(h: Health, flag: str) -> list[str]:
    kinds: dict[str, int] = {}
    for m in h.modules:
        kinds[m.kind] = kinds.get(m.kind, 0) + 1
    lines = ["modules   " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))]
    if h.coverage is not None:
        lines.append("coverage  family        adapted of matrices   share of parameters")
        for c in h.coverage:
            lines.append(
                f"          {c.family:<12} {c.adapted:>8,} of {c.matrices:<10,} {100 * c.share:5.1f} %"
            )
    else:
        lines.append(
            f"coverage  unknown (pass {flag} with the base config to see which families are adapted)"
        )
    named = (
        f"adapter_config names base_model_name_or_path {h.base_name!r} (a name, not a hash)"
        if h.base_name
        else "adapter_config names none"
    )
    if h.base is not None:
        named += f"; {flag} {h.base} gave the structure and coverage above, its identity unchecked"
    advice = RECORD_ADVICE.replace("FILE", f"{h.adapter_dir}/base_fingerprint.json")
    if h.fingerprint_recorded:
        lines.append(f"identity  {named}; base_fingerprint.json recorded: merge checks the base against it")
    elif h.fingerprint_problem:
        lines.append(
            f"identity  {named}; base_fingerprint.json cannot be used ({h.fingerprint_problem}): merge "
            f"refuses it; remove it, then record the base's with {advice}"
        )
    else:
        advice = RECORD_ADVICE.replace("FILE", f"{h.adapter_dir}/base_fingerprint.json")
        lines.append(f"identity  {named}; no base_fingerprint.json: record the base's with {advice}")
    for note, source in h.serving:
        lines.append(f"serving   {note} [{source}]")
    for w in h.warnings:
        lines.append(f"note      {w}")
    lines.append(f"verdict   {h.verdict}")
    return lines


def health_json(h: Health) -> dict[str, Any]:
    return {
        "adapter": str(h.adapter_dir) if h.adapter_dir is not None else None,
        "base": str(h.base) if h.base else None,
        "resolved_with_base": h.resolved_with_base,
        "init_lora_weights": h.init,
        "judged": h.judged,
        "why_unjudged": h.why_unjudged,
        "summary": h.summary(),
        "verdict": str(h.verdict),
        "exit_code": h.verdict.exit_code,
        "modules": [
            {
                "path": m.path,
                "kind": m.kind,
                "target": m.target,
                "rank": m.rank,
                "scaling": m.scaling,
                "a_norm": m.a_norm,
                "b_norm": m.b_norm,
                "delta_norm": m.delta_norm,
                "base_norm": m.base_norm,
                "relative": m.relative,
                "trained": m.trained,
                "judged_on": m.judged_on,
                "num_experts": m.num_experts,
                "idle_experts": list(m.idle_experts),
                "finite": m.finite,
                "width": m.width,
                "rank_above_width": m.rank_above_width,
            }
            for m in h.modules
        ],
        "coverage": None
        if h.coverage is None
        else [
            {"family": c.family, "matrices": c.matrices, "adapted": c.adapted, "share": c.share}
            for c in h.coverage
        ],
        "serving": [{"note": n, "source": s} for n, s in h.serving],
        "base_model_name_or_path": h.base_name,
        "base_fingerprint_recorded": h.fingerprint_recorded,
        "base_fingerprint_problem": h.fingerprint_problem,
    }


# --- fingerprint ----------------------------------------------------------------------------------------


def comparison_lines(r: FingerprintComparison) -> list[str]:
    d, c, why_not = r.difference, r.characterisation, r.why_not
    lines = [f"A         {r.a}", f"B         {r.b}"]
    if d.identical:
        return [*lines, f"verdict   {r.verdict}"]
    lines.append(
        f"differ    {d.num_differing} tensors: {len(d.changed)} changed, {len(d.retyped)} in another "
        f"dtype, {len(d.reshaped)} reshaped, {len(d.only_a)} only in A, {len(d.only_b)} only in B"
    )
    for label, names in (("only in A", d.only_a), ("only in B", d.only_b), ("reshaped", d.reshaped)):
        lines += [f"  {label}: {n}" for n in _clip(names, 5)]
    if c is None and why_not is not None:
        lines.append(f"changes   {why_not}")
        lines += [f"  changed: {n}" for n in _clip(d.comparable)]
    elif c is None:
        pass  # nothing of the same shape differs: the lists above are the whole difference
    else:
        shown = [m for m in c.changes if not m.note.startswith(CAST)]  # casts are counted in the verdict
        if shown:
            lines.append(f"changes   {'tensor':<36} {'rank':>4} {'top-1':>6} {'|D|/|W|':>9} {'shared':>6}")
        for m in shown[: LIST_LIMIT * 2]:
            rank = "-" if m.rank is None else (">=" if m.rank_at_least else "") + str(m.rank)
            cos = "-" if m.residual_cos is None else f"{m.residual_cos:.3f}"
            name = m.name if len(m.name) <= 36 else "..." + m.name[-33:]
            lines.append(f"          {name:<36} {rank:>4} {m.top_share:6.3f} {m.relative:9.3g} {cos:>6}")
            if m.note:
                lines.append(f"            {m.note}")
        if len(shown) > LIST_LIMIT * 2:
            lines.append(f"          ... and {len(shown) - LIST_LIMIT * 2} more (--json lists all)")
        lines.append(f"what      {c.verdict}")
    lines.append(f"verdict   {r.verdict.outcome}")
    return lines


def comparison_json(r: FingerprintComparison) -> dict[str, Any]:
    d, c = r.difference, r.characterisation
    return {
        "a": r.a,
        "b": r.b,
        "identical": d.identical,
        "changed": d.changed,
        "retyped": d.retyped,
        "reshaped": d.reshaped,
        "only_a": d.only_a,
        "only_b": d.only_b,
        "characterisation": None
        if c is None
        else {
            "verdict": c.verdict,
            "ablation": c.ablation,
            "changes": [
                {
                    "name": m.name,
                    "shape": list(m.shape),
                    "rank": m.rank,
                    "rank_at_least": m.rank_at_least,
                    "top_share": m.top_share,
                    "relative": m.relative,
                    "shared_direction_cos": m.residual_cos,
                    "note": m.note,
                }
                for m in c.changes
            ],
        },
        "why_not_characterised": r.why_not,
    }


# --- merge ----------------------------------------------------------------------------------------------


def merge_lines(r: MergeResult) -> list[str]:
    data = r.to_dict()
    return [
        f"merged    {r.modules} adapted modules into {r.merged_tensors} tensors (fp32, cast once); "
        f"{r.copied_tensors} tensors copied",
        f"base      identity {data['base_identity']}",
        f"written   {r.out} ({_size(r.bytes_written)} of weights, dtype {data['dtype']})",
        *_merge_time(r),
    ]


def _merge_time(r: MergeResult) -> list[str]:
    """Where the time went, and what bounded the stream: the disk (reading or writing) or the merging."""
    if r.timings is None:
        return []
    seconds = r.seconds()
    wall = seconds["stream"]
    threads = {"merging" if k == "changing" else k: v for k, v in seconds["by_thread"].items()}
    rate = f"{r.bytes_written / wall / 2**20:,.0f} MiB/s" if wall > 0 else "?"
    bound = seconds["bound"]
    bound_by = f", bound by {'merging' if bound == 'changing' else bound}" if bound else ""
    busy = ", ".join(f"{k} {v:.1f}" for k, v in threads.items())
    plan, imports = seconds["plan"], seconds["imports"]
    planned = f"plan {plan:.1f} s (imports {imports:.1f}, checks {plan - imports:.1f})"
    return [f"time      {planned}; stream {wall:.1f} s at {rate}{bound_by} (busy: {busy} s)"]


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


# --- quant-audit ----------------------------------------------------------------------------------------
