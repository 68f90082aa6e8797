"""Batches for vision SFT: chat template + processor, then labels that keep only what the model must learn.

Labels are -100 everywhere but the assistant's answer and its <end_of_turn> (assistant-only loss), and
always on padding and the image tokens (begin/end of image, image soft tokens). Sequences are cut to
max_length, never inside an image (the model needs every soft token of an image).
"""

from __future__ import annotations

import torch

from trainer.data import to_messages

IGNORE = -100


class VisionSFTCollator:
    def __init__(self, processor, dataset_spec, prompts, max_length: int, assistant_only: bool = True):
        self.processor = processor
        self.dataset_spec = dataset_spec
        self.prompts = prompts
        self.max_length = max_length
        self.assistant_only = assistant_only
        tokenizer = processor.tokenizer
        ids = tokenizer.convert_tokens_to_ids
        self.pad_id = tokenizer.pad_token_id
        self.start_of_turn = ids("<start_of_turn>")
        self.end_of_turn = ids("<end_of_turn>")
        self.image_ids = torch.tensor(
            sorted({ids("<start_of_image>"), ids("<end_of_image>"), tokenizer.image_token_id})
        )
        self.soft_image_id = tokenizer.image_token_id
        self.model_header = tokenizer.encode("model\n", add_special_tokens=False)

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        spec = self.dataset_spec
        texts = [
            self.processor.apply_chat_template(to_messages(row, spec, self.prompts), tokenize=False) for row in rows
        ]
        images = [[row[spec.image_field].convert("RGB")] for row in rows]
        batch = self.processor(text=texts, images=images, padding=True, return_tensors="pt")
        batch = self._truncate(batch)
        batch["labels"] = self.labels(batch["input_ids"], batch["attention_mask"])
        return dict(batch)

    def _truncate(self, batch):
        if batch["input_ids"].shape[1] <= self.max_length:
            return batch
        images_before = (batch["input_ids"] == self.soft_image_id).sum(dim=1)
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            if key in batch:
                batch[key] = batch[key][:, : self.max_length]
        if not torch.equal((batch["input_ids"] == self.soft_image_id).sum(dim=1), images_before):
            raise ValueError(f"training.max_length {self.max_length} cuts into an image; raise it")
        return batch

    def labels(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        labels = input_ids.clone()
        labels[attention_mask == 0] = IGNORE
        labels[torch.isin(input_ids, self.image_ids)] = IGNORE
        if self.assistant_only:
            for row, ids in enumerate(input_ids.tolist()):
                start, end = self._answer_span(ids)
                labels[row, :start] = IGNORE
                labels[row, end:] = IGNORE
        return labels

    def _answer_span(self, ids: list[int]) -> tuple[int, int]:
        """[start, end) of the last model turn's answer, its <end_of_turn> included."""
        header = len(self.model_header)
        for i in range(len(ids) - 1, -1, -1):
            if ids[i] == self.start_of_turn and ids[i + 1 : i + 1 + header] == self.model_header:
                start = i + 1 + header
                try:
                    end = ids.index(self.end_of_turn, start) + 1
                except ValueError:  # cut by max_length: the answer runs to the end
                    end = len(ids)
                return start, end
        return len(ids), len(ids)  # no answer left after truncation: nothing to learn from this row
