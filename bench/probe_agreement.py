"""Do the two independent measurements agree on the embedded tiny model on this CPU?

Runs `tuneproof probe` twice on the embedded tiny Gemma-4-style model (sdpa, batch 2, widths
1024/2048/4096, 3 repeats): forward only (what `tuneproof doctor` runs) and a full training step.
Prints the fit's quadratic share, the kernel table's attention share and the gap at 4096, then the
attention operator time per width from the profiles, which shows why the training step disagrees
on CPU. Run: .venv/bin/python bench/probe_agreement.py
"""

from __future__ import annotations

import warnings

from tuneproof.measure.probe import ProbeSpec, run_probe

warnings.filterwarnings("ignore")
WIDTHS = (1024, 2048, 4096)


def main() -> None:
    for mode in ("forward", "full"):
        r = run_probe(ProbeSpec(widths=WIDTHS, batch=2, mode=mode, repeats=3))
        print(f"{mode:8s} {r.cross_check_line()}")
        print(
            f"{'':8s} medians: "
            + ", ".join(f"{w}: {t.median_s:.3f} s" for w, t in sorted(r.timings.items()))
            + f"; constant term: {r.fit.constant.reason}"
        )
    print("\nattention operator time per width (training step, one profile each):")
    for w in (512, 1024, 2048):
        r = run_probe(ProbeSpec(widths=(w // 4, w // 2, w), batch=2, mode="full", repeats=2))
        print(
            f"  width {w}: attention {r.kernels.ms.get('attention', 0.0):.1f} ms "
            f"of {r.kernels.total_ms:.1f} ms"
        )
    print("(a purely quadratic kernel would grow 4x per doubling; less than 4x is the linear part)")


if __name__ == "__main__":
    main()
