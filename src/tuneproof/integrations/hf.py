"""The Hugging Face Trainer's front door (what users import): `TuneproofCallback`, honest MFU, padding
and recompiles in the Trainer's logs, and `use_bucketing(trainer)`, the bucketing sampler with
per-micro-batch padding. Both are defined in `tuneproof.train` (the tools that run inside a Trainer);
this module only re-exports them, so the import path users have is kept."""

from tuneproof.train.bucketing import dataset_lengths, use_bucketing
from tuneproof.train.callback import TuneproofCallback

__all__ = ["TuneproofCallback", "dataset_lengths", "use_bucketing"]
