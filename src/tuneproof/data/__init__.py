"""Batching: the bucketing sampler, packing, collators and the plan statistics that judge them.

Names load on first use (numpy and torch are not imported by `import tuneproof.data`)."""

from tuneproof.core.lazy import lazy

_EXPORTS = {
    "BucketBatchSampler": "tuneproof.data.sampler",
    "PackedBatchSampler": "tuneproof.data.packing",
    "PackedCollator": "tuneproof.data.packing",
    "PadToLongest": "tuneproof.data.collate",
    "RowsDataset": "tuneproof.data.collate",
    "PlanStats": "tuneproof.data.stats",
    "best_fit_decreasing": "tuneproof.data.packing",
    "check_packed_batch": "tuneproof.data.packing",
    "hf_length_grouped_plan": "tuneproof.data.stats",
    "plan_stats": "tuneproof.data.stats",
    "random_plan": "tuneproof.data.stats",
    "read_lengths": "tuneproof.data.lengths",
    "synthetic_lengths": "tuneproof.data.lengths",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy(__name__, _EXPORTS)
