"""A tiny Gemma 3 vision model, its processor and a synthetic product dataset, all built offline.

The architecture is the real one (Gemma3ForConditionalGeneration: Gemma 3 text decoder + SigLIP
vision tower + multimodal projector), only small; the tokenizer is a BPE trained here with the Gemma
special tokens and the Gemma turn format. Used by the tests and by the embedded local default
(`model.id = "tiny://gemma3"`, `dataset.id = "tiny://products"`).
"""

from __future__ import annotations

import random
from pathlib import Path

IMAGE_SIZE = 64
PATCH = 8
TOKENS_PER_IMAGE = 16
SPECIAL = [
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
]

# The Gemma turn format; the system message is folded into the first user turn, as Gemma 3 does.
# {% generation %} marks what the model says, for TRL's assistant-only loss.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- set system = messages[0]['content'] if messages and messages[0]['role'] == 'system' else none -%}"
    "{%- for message in messages if message['role'] != 'system' -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' }}"
    "{%- if loop.first and system is not none -%}"
    "{%- for part in (system if system is not string else [{'type': 'text', 'text': system}]) -%}"
    "{{ part['text'] + '\\n\\n' }}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- set parts = message['content'] if message['content'] is not string else [{'type': 'text', 'text': message['content']}] -%}"
    "{%- if role == 'model' -%}"
    "{% generation %}{%- for part in parts -%}{{ part['text'] }}{%- endfor -%}{{ '<end_of_turn>' }}{% endgeneration %}"
    "{{ '\\n' }}"
    "{%- else -%}"
    "{%- for part in parts -%}"
    "{%- if part['type'] == 'image' -%}{{ '<start_of_image>' }}{%- else -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}"
    "{{ '<end_of_turn>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)

CATEGORIES = {
    "Toys & Games": ((220, 40, 40), "circle"),
    "Kitchen": ((40, 160, 60), "square"),
    "Electronics": ((40, 70, 220), "triangle"),
    "Sports & Outdoors": ((230, 170, 30), "stripes"),
}
ADJECTIVES = ["compact", "durable", "bright", "classic", "modern", "portable", "premium", "soft", "smart", "sturdy"]
NOUNS = {
    "Toys & Games": ["puzzle", "robot", "kite", "block set", "plush bear"],
    "Kitchen": ["kettle", "knife set", "blender", "cutting board", "mug"],
    "Electronics": ["headphones", "charger", "speaker", "keyboard", "camera"],
    "Sports & Outdoors": ["water bottle", "yoga mat", "tent", "backpack", "ball"],
}


def product_image(category: str, seed: int):
    """A picture that carries the category (colour and shape), so the task is learnable."""
    from PIL import Image, ImageDraw

    colour, shape = CATEGORIES[category]
    rng = random.Random(seed)
    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), tuple(rng.randint(200, 255) for _ in range(3)))
    draw = ImageDraw.Draw(image)
    lo, hi = rng.randint(6, 16), rng.randint(46, 58)
    if shape == "circle":
        draw.ellipse((lo, lo, hi, hi), fill=colour)
    elif shape == "square":
        draw.rectangle((lo, lo, hi, hi), fill=colour)
    elif shape == "triangle":
        draw.polygon([(IMAGE_SIZE // 2, lo), (lo, hi), (hi, hi)], fill=colour)
    else:
        for y in range(lo, hi, 8):
            draw.rectangle((4, y, IMAGE_SIZE - 4, y + 3), fill=colour)
    return image


def product_rows(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        category = rng.choice(sorted(CATEGORIES))
        adjective, noun = rng.choice(ADJECTIVES), rng.choice(NOUNS[category])
        name = f"{adjective.title()} {noun.title()} {rng.randint(100, 999)}"
        description = (
            f"This {adjective} {noun} is made for everyday use. "
            f"A great pick in {category.lower()}, easy to carry and built to last."
        )
        rows.append(
            {
                "Product Name": name,
                "Category": category,
                "description": description,
                "image": product_image(category, seed * 100_003 + index),
            }
        )
    return rows


def product_dataset(count: int = 64, seed: int = 0):
    """The synthetic stand-in for philschmid/amazon-product-descriptions-vlm (same field names)."""
    from datasets import Dataset, Features, Image, Value

    features = Features(
        {"Product Name": Value("string"), "Category": Value("string"), "description": Value("string"), "image": Image()}
    )
    return Dataset.from_list(product_rows(count, seed), features=features)


def _corpus() -> list[str]:
    from functions.core.config import REFERENCE_SYSTEM_PROMPT, REFERENCE_USER_PROMPT

    lines = [REFERENCE_SYSTEM_PROMPT, REFERENCE_USER_PROMPT, "model user system\n\n"]
    for row in product_rows(200, seed=12345):
        lines += [row["Product Name"], row["Category"], row["description"]]
    return lines


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(
        _corpus(),
        trainers.BpeTrainer(
            vocab_size=600, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={
            "start_of_turn": "<start_of_turn>",
            "end_of_turn": "<end_of_turn>",
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        },
        chat_template=CHAT_TEMPLATE,
        padding_side="right",
    )


def build_processor():
    from transformers import Gemma3ImageProcessorPil, Gemma3Processor

    image_processor = Gemma3ImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    return Gemma3Processor(
        image_processor=image_processor,
        tokenizer=build_tokenizer(),
        chat_template=CHAT_TEMPLATE,
        image_seq_length=TOKENS_PER_IMAGE,
    )


def build_config(tokenizer):
    from transformers import Gemma3Config

    ids = tokenizer.convert_tokens_to_ids
    return Gemma3Config(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "max_position_embeddings": 1024,
            "sliding_window": 128,
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": [tokenizer.eos_token_id, ids("<end_of_turn>")],
        },
        vision_config={
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH,
            "vision_use_head": False,
        },  # as in Gemma 3: the pooling head is unused
        mm_tokens_per_image=TOKENS_PER_IMAGE,
        boi_token_index=ids("<start_of_image>"),
        eoi_token_index=ids("<end_of_image>"),
        image_token_index=ids("<image_soft_token>"),
    )


def build_model(processor, seed: int = 0, dtype: str = "float32"):
    import torch
    from transformers import Gemma3ForConditionalGeneration

    torch.manual_seed(seed)
    config = build_config(processor.tokenizer)
    config.text_config.dtype = config.vision_config.dtype = dtype
    return Gemma3ForConditionalGeneration(config).to(getattr(torch, dtype))


def save(directory: Path) -> Path:
    """Write the tiny model and processor as a from_pretrained folder (what a hub download gives)."""
    processor = build_processor()
    build_model(processor).save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory
