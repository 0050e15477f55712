"""The acceptance gate: tuned vs base on diversity, attractor phrases, memorisation and probes, each
judged against the instrument's own run-to-run noise.

Names load on first use (numpy is not imported by `import tuneproof.gate`)."""

from tuneproof.core.lazy import lazy

_EXPORTS = {
    "Arm": "tuneproof.gate.arms",
    "GateReport": "tuneproof.gate.judge",
    "GateSpec": "tuneproof.gate.spec",
    "MetricResult": "tuneproof.gate.stats",
    "PhraseMatcher": "tuneproof.gate.attractors",
    "build_index": "tuneproof.gate.memorise",
    "judge_metric": "tuneproof.gate.stats",
    "mine": "tuneproof.gate.attractors",
    "read_arm": "tuneproof.gate.arms",
    "read_probes": "tuneproof.gate.probes",
    "read_spec": "tuneproof.gate.spec",
    "judge_arms": "tuneproof.gate.judge",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy(__name__, _EXPORTS)
