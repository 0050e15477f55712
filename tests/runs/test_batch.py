"""The one batch reader: documents and padding as the model receives them, from every collator's keys,
and whether the attention path keeps the documents apart (transformers 5.x rules)."""

from __future__ import annotations

import pytest
import torch

from tuneproof.runs.batch import read_batch


def _flat(docs: list[int], pad_to: int | None = None) -> dict[str, torch.Tensor]:
    """One padding-free row as TRL's collator builds it (position_ids, cu_seq_lens, seq_idx)."""
    positions = torch.cat([torch.arange(n) for n in docs])
    ids = torch.randint(2, 50, (len(positions),))
    labels = ids.clone()
    if pad_to is not None and pad_to > len(ids):
        extra = pad_to - len(ids)
        positions = torch.cat([positions, torch.zeros(extra, dtype=torch.long)])
        ids = torch.cat([ids, torch.zeros(extra, dtype=torch.long)])
        labels = torch.cat([labels, torch.full((extra,), -100)])
    starts = (positions == 0).nonzero().flatten()
    cu = torch.cat([starts, torch.tensor([len(positions)])]).to(torch.int32)
    seq_idx = torch.repeat_interleave(torch.arange(len(cu) - 1), cu.diff())
    return {
        "input_ids": ids[None], "labels": labels[None], "position_ids": positions[None],
        "cu_seq_lens_q": cu, "seq_idx": seq_idx[None],
    }  # fmt: skip


@pytest.mark.parametrize("attn", ["eager", "sdpa", "flash_attention_2", "flex_attention"])
def test_a_padding_free_row_is_read_as_its_documents_kept_apart(attn: str) -> None:
    read = read_batch(_flat([5, 7, 3]), attn)
    assert read is not None
    assert read.docs == ((5, 7, 3),) and read.seen.docs == ((5, 7, 3),)
    assert read.apart is True and read.documents_from.startswith("cu_seq_lens_q")
    assert read.padding_from is None and read.tokens == read.slots == 15


def test_padding_after_a_padding_free_row_is_padding_to_intent_and_one_token_documents_to_the_kernel() -> (
    None
):
    read = read_batch(_flat([5, 7], pad_to=16), "sdpa", pad_id=0)
    assert read is not None
    assert read.docs == ((5, 7),) and read.tokens == 12 and read.slots == 16
    assert read.seen.docs == ((5, 7, 1, 1, 1, 1),)  # position 0 on every pad slot: a document each
    assert read.padding_from.startswith("labels == -100 and pad id 0")


@pytest.mark.parametrize("key", ["position_ids", "seq_idx"])
def test_documents_from_position_ids_restarts_or_seq_idx_on_several_rows(key: str) -> None:
    positions = torch.tensor([[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 4, 5]])
    seq_idx = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 0, 0, 0, 0, 0]])
    batch = {
        "input_ids": torch.ones(2, 6, dtype=torch.long),
        key: positions if key == "position_ids" else seq_idx,
    }
    if key == "seq_idx":
        batch["position_ids"] = positions
    read = read_batch(batch, "sdpa")
    assert read is not None and read.docs == ((3, 2, 1), (6,))
    assert read.apart is True
    # flash attention reads packed position_ids in a batch of one row only
    flash = read_batch(batch, "flash_attention_2")
    assert flash is not None and flash.apart is False and "one row" in flash.why_not_apart
    assert flash.seen.docs == ((6,), (6,))


def test_a_2d_mask_or_a_kv_cache_turns_off_packed_detection() -> None:
    batch = _flat([4, 4])
    del batch["cu_seq_lens_q"], batch["seq_idx"]
    masked = read_batch({**batch, "attention_mask": torch.ones(1, 8, dtype=torch.long)}, "sdpa")
    assert masked is not None and masked.apart is False and "2-D attention_mask" in masked.why_not_apart
    assert masked.docs == ((4, 4),) and masked.seen.docs == ((8,),)
    cached = read_batch(batch, "eager", cache=True)
    assert cached is not None and cached.apart is False and "use_cache" in cached.why_not_apart
    assert read_batch(batch, "eager") is not None and read_batch(batch, "eager").apart is True  # type: ignore[union-attr]


def test_axolotl_multipack_sequence_ids_are_documents_apart_only_on_flash() -> None:
    mask = torch.tensor([[1, 1, 1, 2, 2, 3, 0, 0]])
    batch = {"input_ids": torch.ones(1, 8, dtype=torch.long), "attention_mask": mask}
    flash = read_batch(batch, "flash_attention_2")
    assert flash is not None and flash.docs == ((3, 2, 1),) and flash.apart is True
    assert flash.padding_from == "attention mask" and flash.seen.docs == ((3, 2, 1),)
    sdpa = read_batch(batch, "sdpa")
    assert sdpa is not None and sdpa.apart is False and sdpa.seen.docs == ((6,),)


def test_a_4d_block_mask_gives_its_diagonal_blocks() -> None:
    sizes = [3, 5]
    allowed = torch.zeros(8, 8, dtype=torch.bool)
    start = 0
    for n in sizes:
        allowed[start : start + n, start : start + n] = torch.tril(torch.ones(n, n, dtype=torch.bool))
        start += n
    for mask in (allowed, torch.zeros(8, 8).masked_fill(~allowed, float("-inf"))):
        read = read_batch(
            {"input_ids": torch.ones(1, 8, dtype=torch.long), "attention_mask": mask[None, None]}, "eager"
        )
        assert read is not None and read.docs == ((3, 5),) and read.apart is True


def test_padding_without_a_mask_is_found_from_labels_and_the_pad_id_and_the_kernel_sees_full_rows() -> None:
    ids = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
    labels = torch.tensor([[-100, 6, 7, -100, -100], [5, 6, 7, 8, 9]])
    read = read_batch({"input_ids": ids, "labels": labels}, "sdpa", pad_id=0)
    assert read is not None and read.docs == ((3,), (5,))
    assert read.seen.docs == ((5,), (5,)) and not read.seen.is_padded  # no mask: SDPA runs is_causal
    assert read.padding_from == "labels == -100 and pad id 0 (no attention mask)"
    only_labels = read_batch({"input_ids": ids, "labels": labels}, "sdpa")
    assert only_labels is not None and only_labels.padding_from.startswith("labels == -100 (")
    only_pad = read_batch({"input_ids": ids}, "sdpa", pad_id=0)
    assert (
        only_pad is not None
        and only_pad.docs == ((3,), (5,))
        and only_pad.padding_from.startswith("pad id 0")
    )
    unknown = read_batch({"input_ids": ids}, "sdpa")
    assert unknown is not None and unknown.docs == ((5,), (5,)) and unknown.padding_from is None


def test_a_padded_batch_with_a_mask() -> None:
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    read = read_batch({"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": mask}, "sdpa")
    assert read is not None and read.docs == ((3,), (4,)) and read.seen.docs == ((3,), (4,))
    assert read.padding_from == "attention mask" and read.apart is None
    assert read_batch({"inputs_embeds": torch.ones(2, 4, 8)}, "sdpa") is None


def test_a_model_that_hides_packing_sees_one_sequence_per_row_except_flash_given_cu_seq_lens() -> None:
    """`hidden` (the model's forward builds its masks without position_ids) is asked on packed batches
    only; flash given cu_seq_lens_q keeps the documents apart whatever the forward does."""
    asked: list[str] = []

    def hidden() -> str:
        asked.append("x")
        return "its forward hides the packing"

    read = read_batch(_flat([5, 7, 3]), "eager", hidden=hidden)
    assert read is not None and read.apart is False and read.why_not_apart == "its forward hides the packing"
    assert read.docs == ((5, 7, 3),) and read.seen.docs == ((15,),)
    flash = read_batch(_flat([5, 7, 3]), "flash_attention_2", hidden=hidden)
    assert flash is not None and flash.apart is True
    plain = read_batch({"input_ids": torch.ones(2, 8, dtype=torch.long)}, "eager", hidden=hidden)
    assert plain is not None and plain.apart is None
    assert len(asked) == 1
