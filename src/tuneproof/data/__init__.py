"""Batching: the bucketing sampler, packing, collators and the plan statistics that judge them."""

from tuneproof.data.collate import PadToLongest
from tuneproof.data.lengths import read_lengths, synthetic_lengths
from tuneproof.data.packing import PackedBatchSampler, PackedCollator, best_fit_decreasing, check_packed_batch
from tuneproof.data.sampler import BucketBatchSampler
from tuneproof.data.stats import PlanStats, hf_length_grouped_plan, plan_stats, random_plan

__all__ = [
    "BucketBatchSampler",
    "PackedBatchSampler",
    "PackedCollator",
    "PadToLongest",
    "PlanStats",
    "best_fit_decreasing",
    "check_packed_batch",
    "hf_length_grouped_plan",
    "plan_stats",
    "random_plan",
    "read_lengths",
    "synthetic_lengths",
]
