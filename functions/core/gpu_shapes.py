"""Which GPU nodes exist: for each accelerator the schema accepts, the Compute Engine machine types that carry it
and how many GPUs each has. A config asking for a count no machine type has is REJECTED naming the shapes that
exist (functions/core/config.py), instead of waiting out the pending deadline for nodes GKE can never make; the
ComputeClass names the machine type of every priority (functions/core/computeclass.py).

Google's tables, read 2026-12 (https://cloud.google.com/compute/docs/accelerator-optimized-machines and
https://cloud.google.com/compute/docs/gpus): each accelerator-optimized machine type has a fixed GPU model and
count. A4: a4-highgpu-8g only (8 x B200). A3 Ultra: a3-ultragpu-8g only (8 x H200 141GB). A3 High: a3-highgpu-1g,
-2g, -4g, -8g (H100 80GB; A3 Mega and Edge are 8-GPU types of their own GKE accelerator, nvidia-h100-mega-80gb,
which the schema does not offer). A2 Standard: a2-highgpu-1g, -2g, -4g, -8g and a2-megagpu-16g (A100 40GB,
nvidia-tesla-a100; A2 Ultra's 80GB is another accelerator). G2: L4 in g2-standard-4/8/12/16/32 (1 GPU), -24 (2),
-48 (4), -96 (8); the first of each count is listed, the smallest machine that has it.
"""

from __future__ import annotations

SOURCE = "https://cloud.google.com/compute/docs/accelerator-optimized-machines"

# (accelerator, GPUs per node) -> the machine type.
MACHINE_TYPES: dict[tuple[str, int], str] = {
    ("B200", 8): "a4-highgpu-8g",
    ("H200", 8): "a3-ultragpu-8g",
    **{("H100", n): f"a3-highgpu-{n}g" for n in (1, 2, 4, 8)},
    **{("A100", n): f"a2-highgpu-{n}g" for n in (1, 2, 4, 8)},
    ("A100", 16): "a2-megagpu-16g",
    **{("L4", n): machine for n, machine in ((1, "g2-standard-4"), (2, "g2-standard-24"), (4, "g2-standard-48"))},
    ("L4", 8): "g2-standard-96",
}


def counts(accelerator: str) -> list[int]:
    """The GPU counts a node of this accelerator can have."""
    return sorted(n for a, n in MACHINE_TYPES if a == accelerator)


def shape_problem(accelerator: str, gpus_per_node: int) -> str | None:
    """Why no node has this shape, naming the shapes that exist; None when one does (or the run uses no GPU)."""
    if gpus_per_node == 0 or (accelerator, gpus_per_node) in MACHINE_TYPES:
        return None
    shapes = ", ".join(f"{n} ({MACHINE_TYPES[(accelerator, n)]})" for n in counts(accelerator))
    return (
        f"no Compute Engine machine type has {gpus_per_node} x {accelerator}: scaling.gpus_per_node for "
        f"{accelerator} is one of {shapes} ({SOURCE})"
    )
