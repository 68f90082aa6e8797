"""The typed run config: every knob of a fine-tuning run, validated before anything is applied.

Defaults reproduce the reference run (google/gemma-3-4b-it, QLoRA, 2 x 8 B200) with the reference
script's defects fixed (sdpa attention, loss on the answer only, max_length applied).
Every string is constrained by a pattern: values end up in Kubernetes objects and a shell entrypoint.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from functions.core import capacity
from functions.core.capacity import FLEX_START_MAX_SECONDS, CapacityKind
from functions.core.gpu_shapes import shape_problem
from functions.core.sweep import SweepSpec, problems
from functions.core.tracking import DESTINATIONS, TrackingSpec

DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
BUCKET = r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]"  # a GCS bucket name
# Hub id ("org/name"), local absolute path, gs:// URI, or tiny:// (built offline by trainer/tiny.py).
SOURCE = (
    r"^(tiny://[a-z0-9-]+"
    rf"|gs://{BUCKET}(/[A-Za-z0-9._=/-]*)?"
    r"|/[A-Za-z0-9._/-]+"
    r"|[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?)$"
)
STORAGE = rf"^(gs://{BUCKET}(/[A-Za-z0-9._=/-]*)?|/[A-Za-z0-9._/-]+)$"
IMAGE = r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+(:[A-Za-z0-9._-]{1,128})?(@sha256:[a-f0-9]{64})?$"
PIP_REQUIREMENT = r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?((==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!_-]+)?$"
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$"
# apimachinery's IsQualifiedName: an optional DNS-1123 subdomain prefix (dot-separated labels, so no "..", ".-"
# or "-.") and a name (k8s.io/apimachinery/pkg/util/validation/validation.go).
DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
LABEL_KEY = rf"^({DNS1123_LABEL}(\.{DNS1123_LABEL})*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
VERSION = r"^[0-9]+\.[0-9]+\.[0-9]+$"
MODULE = r"^[A-Za-z_][A-Za-z0-9_.]*$"
REGION = r"^[a-z]+-[a-z]+[0-9]+$"
Region = Annotated[str, StringConstraints(pattern=REGION, max_length=32)]
PROJECT = r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$"

Name = Annotated[str, StringConstraints(pattern=DNS_LABEL, max_length=40)]
Source = Annotated[str, StringConstraints(pattern=SOURCE, max_length=256)]
Image = Annotated[str, StringConstraints(pattern=IMAGE, max_length=256)]
Quantity = Annotated[str, StringConstraints(pattern=QUANTITY, max_length=16)]


# A disk image: projects/PROJECT/global/images/NAME (a project id or a domain-scoped one). Autopilot selects it by
# the node label `...node-restriction.kubernetes.io/gke-secondary-boot-disk-NAME`, whose name part is a Kubernetes
# label name of at most 63 characters: NAME has at most 39 (functions/core/image_cache.py).
IMAGE_CACHE_NAME_MAX = 63 - len("gke-secondary-boot-disk-")
IMAGE_CACHE = (
    r"^projects/([a-z][-a-z0-9.:]{4,61}[a-z0-9])/global/images/"
    rf"([a-z](?:[-a-z0-9]{{0,{IMAGE_CACHE_NAME_MAX - 2}}}[a-z0-9])?)$"
)


def image_cache_match(path: str) -> re.Match[str]:
    """projects/PROJECT/global/images/NAME matched (groups: project, name); ValueError naming the form otherwise."""
    match = re.fullmatch(IMAGE_CACHE, path)
    if match is None:
        raise ValueError(
            f"{path!r} is not projects/PROJECT/global/images/NAME (a name of at most {IMAGE_CACHE_NAME_MAX})"
        )
    return match


def _image_cache_hint(value: Any) -> Any:
    """The disk image's path explained before the pattern speaks (its name is bounded by a node label's)."""
    if isinstance(value, str):
        image_cache_match(value)
    return value


ImageCachePath = Annotated[str, BeforeValidator(_image_cache_hint), StringConstraints(pattern=IMAGE_CACHE)]


def _label_key(key: str) -> str:
    """Kubernetes' rule: an optional prefix (a DNS subdomain of at most 253) and a name of at most 63."""
    prefix, _, name = key.rpartition("/")
    if len(name) > 63:
        raise ValueError(f"label key {key[:80]!r}: the name after the prefix has {len(name)} characters; at most 63")
    if len(prefix) > 253:
        raise ValueError(f"label key {key[:80]!r}: the prefix has {len(prefix)} characters; at most 253")
    return key


LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY, max_length=253 + 1 + 63), AfterValidator(_label_key)]
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE, max_length=63)]
Module = Annotated[str, StringConstraints(pattern=MODULE, max_length=100)]
FieldName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9 _.-]+$", max_length=64)]
# Prompt text: free prose, but no control characters beyond newline and tab.
Prose = Annotated[str, StringConstraints(pattern=r"^[^\x00-\x08\x0b-\x1f\x7f]*$", min_length=1, max_length=4000)]

# Validation context of a config already accepted (a run record's): the cross-field rules below decide what is
# admitted, so a release that adds or tightens one never fails a run an earlier release accepted.
STORED = {"stored": True}


def stored(info: ValidationInfo) -> bool:
    return bool((info.context or {}).get("stored"))


Accelerator = Literal["B200", "H200", "H100", "A100", "L4"]
# GKE accelerator labels for the Ray accelerator types we schedule on.
GKE_ACCELERATORS = {
    "B200": "nvidia-b200",
    "H200": "nvidia-h200-141gb",
    "H100": "nvidia-h100-80gb",
    "A100": "nvidia-tesla-a100",
    "L4": "nvidia-l4",
}
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
RESERVATION_LABELS = ("cloud.google.com/reservation-name", "cloud.google.com/reservation-affinity")
# Node labels that choose where GPU capacity comes from (GKE's node selectors for accelerators, reservations,
# Spot, flex-start and compute classes): scaling's own fields set them, and an operator policy fixes them.
CAPACITY_LABELS = frozenset(
    {
        ACCELERATOR_LABEL,
        *RESERVATION_LABELS,
        "cloud.google.com/gke-accelerator-count",
        "cloud.google.com/reservation-project",
        "cloud.google.com/reservation-blocks",
        COMPUTE_CLASS_LABEL,
        "cloud.google.com/gke-spot",
        "cloud.google.com/gke-preemptible",
        "cloud.google.com/gke-flex-start",
        "cloud.google.com/gke-provisioning",
        "cloud.google.com/machine-family",
    }
)


def reservation_selector(reservation: str) -> dict[str, str]:
    """The node labels that put workers on a specific reservation."""
    return {RESERVATION_LABELS[0]: reservation, RESERVATION_LABELS[1]: "specific"}


REFERENCE_SYSTEM_PROMPT = "You are an expert product description writer for Amazon."
REFERENCE_USER_PROMPT = (
    "Create a Short Product description based on the provided <PRODUCT> and <CATEGORY> and image.\n"
    "Only return description. The description should be SEO optimized and for a better mobile search experience.\n\n"
    "<PRODUCT>\n{product}\n</PRODUCT>\n\n<CATEGORY>\n{category}\n</CATEGORY>\n"
)
PROMPT_PLACEHOLDERS = {"product", "category"}

# Versions the trainer is tested with (pyproject's `trainer` extra); the RayJob installs the same.
TRAINER_PIP = (
    "torch==2.13.0",
    "transformers==5.24.0",
    "trl==1.16.0",
    "peft==0.21.2",
    "datasets==5.2.0",
    "accelerate==1.16.0",
    "bitsandbytes==0.50.2",
    "pillow==13.0.0",
    "tensorboard==2.21.0",
    "google-cloud-pubsub==2.44.0",
    "torchmetrics==1.9.0",
    "nltk==3.10.4",
    "sacrebleu==2.6.0",
)
# The tracking destinations' own clients (a row each): in the trainer image, and added to a tracked run's runtime
# env (manifests.runtime_env), never to cluster.pip's default, which every release's policy holds to TRAINER_PIP.
TRACKING_PIP = tuple(pin for destination in DESTINATIONS.values() for pin in destination.pip)
RAY_VERSION = "2.60.0"


class ConfigError(ValueError):
    """A run config that cannot be accepted; `errors` lists one line per bad field."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


class Strict(BaseModel):
    # Each field's docstring is its description in the JSON Schema and docs/config-reference.md.
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), validate_default=True)


TINY_MODEL = "tiny://gemma3"  # built offline by trainer/tiny.py
TINY_DATASET = "tiny://products"
LOCAL_FILE_SUFFIXES = (".parquet", ".json", ".jsonl", ".csv", ".arrow")
# What a dataset folder or gs:// prefix is made of: the files the trainer reads (trainer/data.py), and the
# ones whose versions make a nightly's fingerprint (functions/adapters/datasets.py).
DATA_FILE_SUFFIX = ".parquet"
# A folder written by `Dataset.save_to_disk` (state.json beside its .arrow files) or `DatasetDict.save_to_disk`
# (dataset_dict.json, a folder per split): read with `datasets.load_from_disk`, never as data files.
SAVED_MARKERS = ("state.json", "dataset_dict.json")


def _source_hint(value: Any, kind: str, tiny: str) -> Any:
    """Clear errors for the usual slips before the pattern speaks: an unknown tiny:// id, a relative path."""
    if not isinstance(value, str):
        return value
    if value.startswith("tiny://") and value != tiny:
        raise ValueError(f"{value!r} is not a built-in {kind}; the only one is {tiny!r}")
    relative = value.startswith(("./", "../", "~")) or (
        value.lower().endswith(LOCAL_FILE_SUFFIXES) and not value.startswith(("/", "gs://"))
    )
    if relative:
        raise ValueError(f"{value!r} looks like a relative path: give an absolute path (/...), a gs:// URI or a hub id")
    return value


class ModelSpec(Strict):
    id: Source = "google/gemma-3-4b-it"
    """The base model: a Hugging Face hub id, a gs:// folder or an absolute path holding its files, or tiny://gemma3
    (built offline, for trying things out).
    """
    revision: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,64}$")] | None = None
    """The hub revision (branch, tag or commit) to load; None: the default branch."""
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    """The dtype the model's weights are loaded and trained in."""
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = "sdpa"
    """The attention kernel transformers uses (flash_attention_2 needs the package in the image)."""
    quantization: Literal["nf4", "int8", "none"] = "none"
    """none: bf16 LoRA, the default (a B200/H200 holds the 4B model many times over, and 4-bit weights cost a
    dequantization per matmul); nf4/int8: QLoRA through bitsandbytes, for small GPUs (the reference recipe used
    nf4).
    """
    double_quant: bool = True
    """nf4 only: quantize the quantization constants too (saves ~0.4 bit per parameter)."""

    @field_validator("id", mode="before")
    @classmethod
    def known_source(cls, value: Any) -> Any:
        return _source_hint(value, "model", TINY_MODEL)


class DatasetSpec(Strict):
    id: Source = "philschmid/amazon-product-descriptions-vlm"
    """The training data: a hub dataset id, a gs:// prefix or an absolute path (parquet, JSON lines, CSV, Arrow files,
    or a save_to_disk folder: docs/datasets.md), or tiny://products.
    """
    split: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\[\]:%-]{1,64}$")] = "train"
    """The split to train on (hub datasets' slicing syntax, e.g. train[:10%], is accepted)."""
    max_samples: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    """Train on at most this many rows (the first ones); None: all."""
    eval_fraction: Annotated[float, Field(ge=0, le=0.5)] = 0.0
    """Held out for evaluation at every save; the best checkpoint is then the lowest eval loss. A row is held out by a
    stable hash of its key, so the held-out set stays the same across nights as data grows.
    """
    key_field: FieldName | None = None
    """The column that identifies a row for the held-out hash; None: the product field (one product's rows never
    straddle training and evaluation).
    """
    product_field: FieldName = "Product Name"
    """The column holding the product's name ({product} in prompts.user)."""
    category_field: FieldName = "Category"
    """The column holding the product's category ({category} in prompts.user)."""
    answer_field: FieldName = "description"
    """The column holding the text the model learns to write."""
    image_field: FieldName = "image"
    """The column holding the product's image (an image, bytes or a {bytes, path} struct)."""

    @field_validator("id", mode="before")
    @classmethod
    def known_source(cls, value: Any) -> Any:
        return _source_hint(value, "dataset", TINY_DATASET)


class PromptSpec(Strict):
    system: Prose = REFERENCE_SYSTEM_PROMPT
    """The system prompt of every conversation."""
    user: Prose = REFERENCE_USER_PROMPT
    """The user turn's text beside the image; may use {product} and {category}."""

    @field_validator("user")
    @classmethod
    def only_known_placeholders(cls, template: str) -> str:
        import string

        used = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
        unknown = used - PROMPT_PLACEHOLDERS
        if unknown:
            raise ValueError(f"unknown placeholders {sorted(unknown)}; allowed: {sorted(PROMPT_PLACEHOLDERS)}")
        return template


class LoraSpec(Strict):
    r: Annotated[int, Field(ge=1, le=1024)] = 16
    """The LoRA rank of each adapted matrix."""
    alpha: Annotated[int, Field(ge=1, le=4096)] = 16
    """The LoRA scaling numerator (the update is scaled by alpha / r)."""
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.05
    """Dropout on the LoRA path during training."""
    bias: Literal["none", "all", "lora_only"] = "none"
    """Which biases train with the adapter (PEFT's bias option)."""
    target_modules: Literal["all-linear"] | Annotated[list[Module], Field(min_length=1, max_length=64)] = "all-linear"
    """The modules that get adapters: all-linear (every linear layer but the head), or module names."""
    modules_to_save: Annotated[list[Module], Field(max_length=16)] = []
    """Modules trained in full and saved with the adapter. The recipe saved lm_head and embed_tokens: 1,342 M of its
    1,381 M trainable parameters (the 262k vocabulary), their AdamW state, a cross-node all-reduce each step and
    multi-GB checkpoints, for a task that adds no tokens. Empty by default.
    """


class TrainingSpec(Strict):
    epochs: Annotated[float, Field(gt=0, le=1000)] = 3
    """Passes over the training rows (fractions allowed); max_steps wins when set."""
    max_steps: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    """Stop after this many optimizer steps; None: epochs decide."""
    per_device_batch_size: Annotated[int, Field(ge=1, le=1024)] = 4
    """Rows per GPU (or CPU worker) in one forward/backward. 4 x 1 keeps the recipe's effective batch (1 x 4) in one
    pass: the GPU sees 4 rows at once.
    """
    gradient_accumulation_steps: Annotated[int, Field(ge=1, le=1024)] = 1
    """Forward/backward passes per optimizer step."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass instead of keeping them. Off: a 4B model's activations at batch 4 fit
    a B200/H200 easily, and recomputing them costs about a third more compute.
    """
    learning_rate: Annotated[float, Field(gt=0, le=1.0)] = 2e-4
    """The optimizer's peak learning rate."""
    lr_scheduler: Literal["constant", "constant_with_warmup", "linear", "cosine"] = "constant"
    """How the learning rate moves over the run."""
    warmup_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.03
    """The fraction of steps spent warming the learning rate up (schedulers with warmup)."""
    max_grad_norm: Annotated[float, Field(gt=0, le=1000)] = 0.3
    """Gradients are clipped to this global norm."""
    optim: Literal["adamw_torch_fused", "adamw_torch", "paged_adamw_8bit"] = "adamw_torch_fused"
    """The optimizer (transformers' names)."""
    max_length: Annotated[int, Field(ge=64, le=131072)] = 1024
    """Tokens per row at most (the image's tokens included); longer rows are truncated."""
    assistant_only_loss: bool = True
    """Learn from the answer's tokens only, not the prompt's."""
    logging_steps: Annotated[int, Field(ge=1, le=100_000)] = 10
    """Report the loss (and progress) every this many steps."""
    dataloader_workers: Annotated[int, Field(ge=0, le=32)] | None = None
    """Processes that render, tokenize and preprocess images beside each training process, so the GPU never waits on
    them; None: 4 on GPU (an A4 node has 28 vCPUs a GPU), 0 (in-process) on CPU.
    """
    save_strategy: Literal["epoch", "steps"] = "epoch"
    """When checkpoints are saved: every epoch, or every save_steps steps."""
    keep_checkpoints: Annotated[int, Field(ge=1, le=10_000)] | None = None
    """Training checkpoints kept after the run (None: all); the best and the last are always kept."""
    save_steps: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    """With save_strategy steps: save every this many steps."""
    checkpoint_every_steps: Annotated[int, Field(ge=0, le=10_000_000)] | None = None
    """Checkpoints beside the save strategy every N steps, so a run that loses its nodes loses at most N steps. None:
    on Spot capacity, Young's interval from the checkpoint's size and step time; else none. 0: none, even on Spot.
    """
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 42
    """The seed of the adapter's initialization and the data order (the held-out split hashes keys, seedless)."""
    init_adapter: Literal["champion"] | Annotated[str, StringConstraints(pattern=STORAGE, max_length=256)] | None = None
    """Warm start: champion (the adapter now in use for this config name; a fresh adapter when there is none) or an
    adapter folder (gs:// or a path). None: a fresh LoRA adapter. A loaded adapter keeps its own rank and target
    modules: the lora section shapes fresh adapters only.
    """

    def loader_workers(self, use_gpu: bool) -> int:
        return self.dataloader_workers if self.dataloader_workers is not None else (4 if use_gpu else 0)

    @model_validator(mode="after")
    def steps_need_save_steps(self, info: ValidationInfo) -> TrainingSpec:
        if stored(info):
            return self
        if self.save_strategy == "steps" and self.save_steps is None:
            raise ValueError("save_strategy 'steps' needs save_steps")
        return self


class CapacityOption(Strict):
    """One way to get the GPU nodes, in the order `scaling.capacity` lists them (GKE's accelerator consumption
    options, rendered as one ComputeClass priority each: functions/core/computeclass.py)."""

    kind: CapacityKind
    """Where this option's nodes come from: a reservation, flex-start (queued provisioning), Spot VMs or on-demand.
    """
    name: Name | None = None
    """reservation: its name."""
    project: Annotated[str, StringConstraints(pattern=PROJECT)] | None = None
    """reservation: a shared reservation's project (the deployment's project unless the operator's policy lists
    others).
    """
    block: Name | None = None
    """reservation: one block of it."""
    max_run_seconds: Annotated[int, Field(ge=600, le=FLEX_START_MAX_SECONDS)] | None = None
    """flex-start: how long its VMs live (GKE's maxRunDurationSeconds; at most, and by default, 7 days)."""
    pending_seconds: Annotated[int, Field(ge=60, le=7 * 86400)] | None = None
    """How long a run may wait for nodes when this option is in its list (flex-start requests can queue for hours): the
    run's pending deadline is the longest of its options', and never below deadlines.pending_seconds.
    """
    # Left out where unset, as run records are written: a release before regions reads them.
    region: Region | None = Field(None, exclude_if=lambda region: region is None)
    """The one region of the run's (cluster.region, cluster.fallback_regions) where this option is offered; None:
    every region of the run.
    """

    @model_validator(mode="after")
    def fields_of_its_kind(self) -> CapacityOption:
        if found := capacity.option_problems(self):
            raise ValueError(found[0])
        return self

    def describe(self) -> str:
        if self.kind == "reservation":
            where = f"{self.project}/" if self.project else ""
            return f"reservation {where}{self.name}" + (f" (block {self.block})" if self.block else "")
        return self.kind


class ScalingSpec(Strict):
    nodes: Annotated[int, Field(ge=1, le=64)] = 2
    """GPU worker nodes the run trains on (the reference used 2 A4 nodes)."""
    gpus_per_node: Annotated[int, Field(ge=0, le=16)] = 8
    """GPUs of each node, one Ray Train worker each (a count no machine type of the accelerator has is rejected); 0: a
    CPU run.
    """
    accelerator: Accelerator = "B200"
    """The GPU the nodes carry."""
    reservation: Name | None = None
    """A Compute Engine reservation the nodes are taken from (as the reference did); None: on-demand, or what
    scaling.capacity says.
    """
    capacity: Annotated[list[CapacityOption], Field(min_length=1, max_length=4)] | None = None
    """Where the GPU nodes come from, in order of preference (GKE falls back to the next when one has no capacity): a
    ComputeClass the worker group selects. None: the operator's default (policy capacity), else scaling.reservation
    alone, as the reference did (no ComputeClass).
    """
    node_selector: Annotated[dict[LabelKey, LabelValue], Field(max_length=16)] = {}
    """Extra node labels the workers must land on; labels that choose capacity (Spot, reservations, compute classes)
    are the capacity fields' and the operator's, and are rejected here.
    """
    cpus_per_worker: Annotated[int, Field(ge=1, le=256)] = 1
    """CPUs Ray reserves for each training worker."""
    max_failures: Annotated[int, Field(ge=0, le=100)] = 2
    """Ray Train's restarts of the worker group within one job after a worker fails."""
    max_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    """Submissions of the job when it is lost with its nodes (preempted, node gone) rather than by a training error:
    each later attempt resumes from the run's last checkpoint. Ray Train's in-job restarts (max_failures) come
    first; an attempt is the next job when those are spent.
    """

    @model_validator(mode="after")
    def selectors_do_not_contradict_fields(self, info: ValidationInfo) -> ScalingSpec:
        if stored(info):
            return self
        if problem := shape_problem(self.accelerator, self.gpus_per_node):
            raise ValueError(problem)
        if self.capacity is not None:
            if self.reservation is not None:
                raise ValueError(
                    "scaling.reservation and scaling.capacity both say where nodes come from: list the "
                    "reservation in scaling.capacity ({kind: reservation, name: ...})"
                )
            if not self.use_gpu:
                raise ValueError("scaling.capacity chooses GPU capacity: a CPU run (gpus_per_node 0) has none")
            keys = [(o.kind, o.project, o.name, o.block) for o in self.capacity]
            if len(set(keys)) != len(keys):
                raise ValueError("scaling.capacity lists an option twice")
            chosen = sorted(k for k in self.node_selector if k in CAPACITY_LABELS)
            if chosen:
                raise ValueError(f"scaling.node_selector sets {', '.join(chosen)}, which scaling.capacity decides")
        derived = self.derived_selectors()
        clashes = sorted(k for k, v in self.node_selector.items() if k in derived and derived[k] != v)
        if clashes:
            raise ValueError(
                f"scaling.node_selector sets {', '.join(clashes)}, which scaling.accelerator / scaling.reservation "
                "decide: set those fields instead"
            )
        return self

    def derived_selectors(self) -> dict[str, str]:
        """The worker node labels scaling's own fields decide (they win over node_selector); none with a capacity
        list: its ComputeClass says which GPUs and where from (functions/core/computeclass.py selector)."""
        if self.capacity is not None:
            return {}
        selector = {ACCELERATOR_LABEL: GKE_ACCELERATORS[self.accelerator]} if self.use_gpu else {}
        if self.reservation:
            selector.update(reservation_selector(self.reservation))
        return selector

    @property
    def on_spot(self) -> bool:
        """Whether the run's nodes may be taken at short notice (Spot VMs: preempted with a 30 s notice)."""
        return any(capacity.KINDS[o.kind].preemptible for o in self.capacity or ())

    @property
    def num_workers(self) -> int:
        """One Ray Train worker per GPU; one per node on CPU."""
        return self.nodes * (self.gpus_per_node or 1)

    @property
    def use_gpu(self) -> bool:
        return self.gpus_per_node > 0


class ResourcesSpec(Strict):
    cpu: Quantity
    """CPU request and limit (a Kubernetes quantity)."""
    memory: Quantity
    """Memory request and limit (a Kubernetes quantity)."""
    ephemeral_storage: Quantity
    """Ephemeral storage request and limit (a Kubernetes quantity)."""


class ClusterSpec(Strict):
    gke_cluster: Name = "raytune"
    """The GKE Autopilot cluster the run goes to."""
    region: Region = "us-central1"
    """The region the run starts in (its GKE cluster is the one named gke_cluster there)."""
    # Left out where empty, as run records are written: a release before regions reads them.
    fallback_regions: Annotated[list[Region], Field(max_length=4)] = Field([], exclude_if=lambda regions: not regions)
    """Where the run moves next, in order, when it waits for GPU capacity longer than deadlines.region_seconds in the
    region before (each region's GKE cluster of the same name and its shared RayCluster): functions/core/regions.py.
    """
    namespace: Name = "default"
    """The Kubernetes namespace of the RayCluster and the RayJobs."""
    ray_cluster: Name = "gemma3-tuning"
    """The shared RayCluster's name: runs with the same one share its head and take worker groups of their own."""
    ray_version: Annotated[str, StringConstraints(pattern=VERSION)] = RAY_VERSION
    """The Ray version of the cluster's images (it must match the trainer's)."""
    head_image: Image | None = None
    """The head's image; None: rayproject/ray:<ray_version>-py311."""
    worker_image: Image | None = None
    """The workers' image (raytune image builds one with the trainer's packages); None:
    rayproject/ray:<ray_version>-py311-gpu.
    """
    # Left out where unset, as run records are written: a release before the image cache reads them.
    image_cache: ImageCachePath | None = Field(None, exclude_if=lambda path: path is None)
    """A disk image holding worker_image (projects/PROJECT/global/images/NAME, made by `raytune image --cache`),
    attached to each GPU node as a secondary boot disk so the image is not pulled; None: nodes pull it
    (functions/core/image_cache.py).
    """
    head: ResourcesSpec = ResourcesSpec(cpu="24", memory="64Gi", ephemeral_storage="9Gi")
    """The head pod's resources (it bills around the clock while the RayCluster exists)."""
    worker: ResourcesSpec | None = None
    """A worker pod's resources; None: only the GPUs and worker_disk are requested and Autopilot sizes the rest of the
    A4 node.
    """
    worker_disk: Quantity = "200Gi"
    """Ephemeral storage of a GPU worker when worker is unset, on the node's local SSD: the Hugging Face cache (the
    model, ~8.6 GB for gemma-3-4b, once per node), the dataset cache, checkpoints before upload. Autopilot's default
    (1 GiB) is below one model download.
    """
    max_worker_nodes: Annotated[int, Field(ge=1, le=64)] = 5
    """GPU worker nodes the RayCluster may hold at once; runs that do not fit beside the live ones wait QUEUED."""
    idle_delete_seconds: Annotated[int, Field(ge=0, le=30 * 86400)] = 1800
    """Delete the RayCluster (its head pod bills around the clock) after this long with no live or queued run; the next
    launch recreates it. 0: never.
    """
    dependencies: Literal["pip", "image"] = "pip"
    """pip: install the trainer's pinned packages at job start (cached per node by Ray); image: the worker image
    already has them (fast start, recommended for production).
    """
    pip: Annotated[
        list[Annotated[str, StringConstraints(pattern=PIP_REQUIREMENT, max_length=100)]], Field(max_length=64)
    ] = list(TRAINER_PIP)
    """The packages installed at job start with dependencies pip (the trainer's pins by default)."""

    @property
    def regions(self) -> tuple[str, ...]:
        """The run's regions in the order it tries them."""
        return (self.region, *self.fallback_regions)

    @property
    def head_image_ref(self) -> str:
        return self.head_image or f"rayproject/ray:{self.ray_version}-py311"

    @property
    def worker_image_ref(self) -> str:
        return self.worker_image or f"rayproject/ray:{self.ray_version}-py311-gpu"


class DeadlineSpec(Strict):
    pending_seconds: Annotated[int, Field(ge=60, le=7 * 86400)] = 3600
    """Give up on a job that has not started after this long (KubeRay jobs can hang in Initializing/PENDING)."""
    queue_seconds: Annotated[int, Field(ge=60, le=30 * 86400)] = 86400
    """How long a run may wait QUEUED for worker nodes, counted from its arrival."""
    run_seconds: Annotated[int, Field(ge=60, le=30 * 86400)] = 86400
    """Hard limit on the whole job (RayJob activeDeadlineSeconds)."""
    # Left out where unset, as run records are written: a release before regions reads them.
    region_seconds: Annotated[int, Field(ge=5, le=7 * 86400)] | None = Field(
        None, exclude_if=lambda seconds: seconds is None
    )
    """How long a submitted run waits for its nodes in one region before it moves to the next of
    cluster.fallback_regions (never longer than its pending deadline); None: the operator's default (policy
    region_seconds), which also caps it.
    """


class EvaluationSpec(Strict):
    """After training: the new adapter (challenger) and the champion (or the base model when there is none)
    describe the same held-out samples; the report shows them side by side, and the champion pointer moves
    to the challenger only when it wins on `metric` by more than `margin`."""

    samples: Annotated[int, Field(ge=0, le=1000)] = 0
    """Held-out rows the challenger and the champion each describe after training; 0: no evaluation, no champion."""
    metric: Literal["rougeL", "bleu", "eval_loss"] = "rougeL"
    """The metric that decides the champion: eval_loss (lower wins), rougeL or bleu (higher wins)."""
    margin: Annotated[float, Field(ge=0, le=100)] = 0.0
    """How much the challenger must win by to become the champion (ROUGE-L in 0..1, BLEU in 0..100, loss in nats).
    """
    max_new_tokens: Annotated[int, Field(ge=1, le=2048)] = 128
    """Tokens each evaluated description may have at most."""


class ExportSpec(Strict):
    merged: bool = False
    """Save the adapter merged into the base model as safetensors with the processor (ready for vLLM)."""
    hub_repo: (
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")] | None
    ) = None
    """Push the merged model to this Hugging Face Hub repo (private, with the run's HF token)."""

    @model_validator(mode="after")
    def push_needs_merge(self, info: ValidationInfo) -> ExportSpec:
        if stored(info):
            return self
        if self.hub_repo and not self.merged:
            raise ValueError("hub_repo pushes the merged model: set merged: true")
        return self


class RunConfig(Strict):
    name: Name = "gemma3-vision"
    """The config's name: run ids start with it, and a nightly's champion line is kept per name."""
    labels: Annotated[dict[LabelKey, LabelValue], Field(max_length=16)] = {}
    """Labels copied onto the run's RayJob (for cost reports and selectors); raytune's own labels win."""
    model: ModelSpec = ModelSpec()
    """The base model and how it is loaded."""
    dataset: DatasetSpec = DatasetSpec()
    """The training data and the columns it is read from."""
    prompts: PromptSpec = PromptSpec()
    """The conversation each row becomes."""
    lora: LoraSpec = LoraSpec()
    """The LoRA adapter trained."""
    training: TrainingSpec = TrainingSpec()
    """The trainer's knobs (TRL SFTTrainer)."""
    scaling: ScalingSpec = ScalingSpec()
    """The GPU nodes the run takes and what Ray Train does when workers fail."""
    cluster: ClusterSpec = ClusterSpec()
    """The GKE cluster, the shared RayCluster and its images."""
    deadlines: DeadlineSpec = DeadlineSpec()
    """How long a run may wait and run."""
    evaluation: EvaluationSpec = EvaluationSpec()
    """The held-out comparison with the champion after training."""
    export: ExportSpec = ExportSpec()
    """What is made of the adapter after training."""
    # Left out of a config without one, as it is written into run records: a release before sweeps reads them.
    sweep: SweepSpec | None = Field(None, exclude_if=lambda sweep: sweep is None)
    """A hyperparameter search: trials of this config over the fields it names, run by Ray Tune on the run's
    worker group; the best trial's adapter is the run's (functions/core/sweep.py)."""
    tracking: TrackingSpec | None = Field(None, exclude_if=lambda tracking: tracking is None)
    """Experiment tracking: the run in MLflow and/or Weights & Biases (docs/tracking.md); None: the operator's
    default (none in the embedded local default)."""
    storage_path: Annotated[str, StringConstraints(pattern=STORAGE, max_length=256)] | None = None
    """Where checkpoints, the adapter and the result go (gs:// or a path); None: the controller's bucket
    (gs://<bucket>/checkpoints).
    """

    def with_storage(self, default: str | None) -> RunConfig:
        """Fill in the default checkpoint location (the controller's, e.g. gs://<bucket>/checkpoints) when the
        config names none."""
        if self.storage_path:
            return self
        if not default:
            raise ConfigError(["storage_path: not set and no bucket given (pass --bucket or set storage_path)"])
        return self.model_copy(update={"storage_path": default})

    @property
    def group_nodes(self) -> int:
        """The worker nodes the run holds: scaling.nodes, for each trial a sweep runs at once."""
        return self.scaling.nodes * (self.sweep.concurrent if self.sweep else 1)

    @model_validator(mode="after")
    def fits_the_cluster(self, info: ValidationInfo) -> RunConfig:
        if stored(info):
            return self
        if self.group_nodes > self.cluster.max_worker_nodes:
            held = f"scaling.nodes ({self.scaling.nodes})"
            if self.sweep:
                held = f"{held} x sweep.concurrent ({self.sweep.concurrent})"
            raise ValueError(
                f"{held} is more than cluster.max_worker_nodes ({self.cluster.max_worker_nodes}): "
                "the run could never be admitted"
            )
        return self

    @model_validator(mode="after")
    def sweep_is_runnable(self, info: ValidationInfo) -> RunConfig:
        if stored(info) or not (found := problems(self)):
            return self
        raise ValueError("; ".join(found))

    @model_validator(mode="after")
    def regions_are_usable(self, info: ValidationInfo) -> RunConfig:
        if stored(info) or not (found := self.region_problems()):
            return self
        raise ValueError("; ".join(found))

    def region_problems(self) -> list[str]:
        """What makes the run's regions unusable: a region twice, a capacity option offered in a region the run never
        goes to, or a region where none of its options is offered (that region's ComputeClass would be empty). The
        operator's default capacity list is judged by the same rule (Policy.violations)."""
        regions = self.cluster.regions
        found = []
        if len(set(regions)) != len(regions):
            found.append(f"cluster.fallback_regions repeats a region of {list(regions)}")
        options = self.scaling.capacity or []
        for index, option in enumerate(options):
            if option.region is not None and option.region not in regions:
                found.append(
                    f"scaling.capacity[{index}].region {option.region!r} is not one of the run's regions "
                    f"{list(regions)} (cluster.region, cluster.fallback_regions)"
                )
        bare = [r for r in regions if options and not any(o.region in (None, r) for o in options)]
        if bare:
            found.append(f"scaling.capacity offers no option in {', '.join(bare)}: give one there, or drop the region")
        return found

    @model_validator(mode="after")
    def image_cache_is_attachable(self, info: ValidationInfo) -> RunConfig:
        """Without a capacity list, the cache is asked for by a node selector whose value holds the disk image's
        project, and no label value may hold the ':' of a domain-scoped project (`example.com:proj`)."""
        cache = self.cluster.image_cache
        if stored(info) or not cache or ":" not in image_cache_match(cache)[1]:
            return self
        if self.scaling.capacity is not None and self.scaling.use_gpu:
            return self  # its ComputeClass names the project in a field (storage.secondaryBootDisks)
        raise ValueError(
            f"cluster.image_cache {cache!r} is in a domain-scoped project, which a node selector cannot name (a "
            "Kubernetes label value holds no ':'): give scaling.capacity, whose ComputeClass attaches the cache"
        )

    @model_validator(mode="after")
    def evaluation_needs_held_out_samples(self, info: ValidationInfo) -> RunConfig:
        if stored(info):
            return self
        if self.evaluation.samples and not self.dataset.eval_fraction:
            raise ValueError("evaluation.samples needs a held-out set: set dataset.eval_fraction above 0")
        return self

    @model_validator(mode="after")
    def gpu_only_knobs(self, info: ValidationInfo) -> RunConfig:
        if stored(info):
            return self
        if not self.scaling.use_gpu and self.model.quantization != "none" and not self.model.id.startswith("tiny://"):
            raise ValueError("4-bit/8-bit quantization of a real model needs GPUs (scaling.gpus_per_node > 0)")
        return self


def stored_config(config: dict[str, Any]) -> RunConfig:
    """A run record's config as the controller reads it: as today's rules admit it, or, for a run accepted under
    earlier rules, with its fields still typed and bounded but the admission rules not applied again. A field an
    older record's config lacks takes today's default (e.g. scaling.max_attempts 3): the one place stored configs
    are read, and so the one place older records' behaviour is decided (decide() reads only this)."""
    try:
        return RunConfig.model_validate(config)
    except ValidationError:
        return RunConfig.model_validate(config, context=STORED)
