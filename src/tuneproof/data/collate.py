"""Pad each micro-batch to its own longest member (never to a global maximum)."""

from __future__ import annotations

from typing import Any

from tuneproof.core import validate


class PadToLongest:
    """input_ids padded with `pad_token_id`, labels with -100, attention_mask 1/0, to the micro-batch's
    longest sequence (rounded up to `pad_to_multiple_of`)."""

    def __init__(self, pad_token_id: int, pad_to_multiple_of: int = 1, label_pad: int = -100) -> None:
        validate.integer("pad_token_id", pad_token_id, low=0, high=2**31 - 1)
        validate.integer("pad_to_multiple_of", pad_to_multiple_of, high=1 << 20, hint="use 1 for none")
        self.pad, self.multiple, self.label_pad = pad_token_id, pad_to_multiple_of, label_pad

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        longest = max(len(f["input_ids"]) for f in features)
        width = -(-longest // self.multiple) * self.multiple
        ids, labels, mask = [], [], []
        for f in features:
            x = list(f["input_ids"])
            y = list(f.get("labels", x))
            pad = width - len(x)
            ids.append(x + [self.pad] * pad)
            labels.append(y + [self.label_pad] * pad)
            mask.append([1] * len(x) + [0] * pad)
        return {
            "input_ids": torch.tensor(ids),
            "labels": torch.tensor(labels),
            "attention_mask": torch.tensor(mask),
        }


class RowsDataset:
    """A map-style dataset over a list of example dicts (`{"input_ids": [...]}`), what a Trainer takes."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.rows[i]
