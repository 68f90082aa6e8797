"""Whether the trainer image runs on the GPUs the schema offers: from the versions pip resolves for the image's
platform (image/resolved.json: `raytune image --write-resolved`, pip's own report; no CUDA is downloaded), the
CUDA the torch build was made with, the GPU architectures that build, NCCL and bitsandbytes carry, against each
accelerator's compute capability. tests/integration/test_image.py holds the image to it.

Facts, with their sources (read 2026-12-05):
- Compute capabilities: B200 10.0, H100 and H200 9.0, A100 8.0, L4 8.9 (https://developer.nvidia.com/cuda-gpus).
  A cubin for sm_XY runs on any GPU of major X and minor >= Y; PTX is compiled for newer GPUs at load.
- PyTorch's Linux x86_64 wheels per CUDA version (pytorch/pytorch@799d09f2 .ci/manywheel/build_cuda.sh,
  TORCH_CUDA_ARCH_LIST): 12.6: 5.0-9.0; 12.8: 7.0-9.0, 10.0, 12.0; 12.9 and 13.0 add 12.0+PTX, 13.0 drops < 7.5.
  The wheel's CUDA is its cuda-toolkit (13.x) or nvidia-cuda-runtime-cu12 (12.x) requirement.
- NCCL builds sm_90 from CUDA 12.0 and sm_100 from CUDA 12.8 (NVIDIA/nccl makefiles/common.mk, CUDA12_GENCODE and
  CUDA12_8_GENCODE); its wheels nvidia-nccl-cu13 are built with CUDA 13, nvidia-nccl-cu12 from 2.26 with 12.8+.
- bitsandbytes builds 10.0 and 12.0 from 0.45.1 (bitsandbytes-foundation/bitsandbytes#1481) and ships CUDA 12.8
  binaries from 0.45.3; it loads the binary of torch's CUDA (libbitsandbytes_cudaXYZ). 0.50.2's wheel carries
  cuda118-cuda132 (its file list).
"""

from __future__ import annotations

from collections.abc import Mapping

COMPUTE_CAPABILITY = {"B200": (10, 0), "H200": (9, 0), "H100": (9, 0), "A100": (8, 0), "L4": (8, 9)}

# TORCH_CUDA_ARCH_LIST of PyTorch's x86_64 wheels, by the CUDA they are built with: (cubins, PTX).
TORCH_ARCHES: dict[tuple[int, int], tuple[set[tuple[int, int]], set[tuple[int, int]]]] = {
    (12, 6): ({(5, 0), (6, 0), (7, 0), (7, 5), (8, 0), (8, 6), (9, 0)}, set()),
    (12, 8): ({(7, 0), (7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0)}, set()),
    (12, 9): ({(7, 0), (7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0)}, {(12, 0)}),
    (13, 0): ({(7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0)}, {(12, 0)}),
}
# bitsandbytes' binaries of one wheel: libbitsandbytes_cuda<XYZ>.so (0.50.2, its file list).
BNB_CUDA = {"0.50.2": {(11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (13, 0), (13, 2)}}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("+")[0].split(".") if part.isdigit())


def runs(capability: tuple[int, int], cubins: set[tuple[int, int]], ptx: set[tuple[int, int]]) -> bool:
    """A cubin of the same major at or below the GPU's minor, or PTX at or below its capability."""
    major, minor = capability
    return any(m == major and n <= minor for m, n in cubins) or any(p <= capability for p in ptx)


def torch_cuda(packages: Mapping[str, str]) -> tuple[int, int] | None:
    """The CUDA a resolved torch wheel was built with, from what it requires."""
    if "cuda-toolkit" in packages:
        return _version(packages["cuda-toolkit"])[:2]  # type: ignore[return-value]
    if "nvidia-cuda-runtime-cu12" in packages:
        return _version(packages["nvidia-cuda-runtime-cu12"])[:2]  # type: ignore[return-value]
    return None


def nccl_cuda(packages: Mapping[str, str]) -> tuple[int, int] | None:
    """The CUDA the resolved NCCL wheel was built with (the oldest it can be, by its name and version)."""
    if "nvidia-nccl-cu13" in packages:
        return (13, 0)
    if "nvidia-nccl-cu12" in packages:
        return (12, 8) if _version(packages["nvidia-nccl-cu12"]) >= (2, 26) else (12, 0)
    return None


def problems(packages: Mapping[str, str], accelerator: str) -> list[str]:
    """Why the image's packages would not run on this accelerator; [] when they would."""
    capability = COMPUTE_CAPABILITY[accelerator]
    sm = f"sm_{capability[0]}{capability[1]}"
    found = []
    cuda = torch_cuda(packages)
    if cuda is None or cuda not in TORCH_ARCHES:
        found.append(f"torch {packages.get('torch')}: a CPU build or a CUDA ({cuda}) whose architectures are not known")
    elif not runs(capability, *TORCH_ARCHES[cuda]):
        found.append(f"torch {packages['torch']} (CUDA {cuda[0]}.{cuda[1]}) carries no {sm} code for {accelerator}")
    nccl = nccl_cuda(packages)
    needs = (12, 8) if capability >= (10, 0) else (12, 0) if capability >= (9, 0) else (11, 0)
    if nccl is None or nccl < needs:
        found.append(f"NCCL ({nccl}) is built without {sm} for {accelerator}: it needs CUDA {needs[0]}.{needs[1]}+")
    bnb = packages.get("bitsandbytes")
    if bnb is None or (capability >= (10, 0) and _version(bnb) < (0, 45, 3)):
        found.append(f"bitsandbytes {bnb}: no {sm} build for {accelerator} (0.45.3 is the first)")
    elif cuda is not None and bnb in BNB_CUDA and cuda not in BNB_CUDA[bnb]:
        found.append(f"bitsandbytes {bnb} ships no binary for torch's CUDA {cuda[0]}.{cuda[1]}")
    return found
