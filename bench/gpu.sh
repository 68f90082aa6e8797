#!/usr/bin/env bash
# The trainer benchmark on one GPU (H200 or B200), every arm within about 8 minutes:
#   bash bench/gpu.sh [extra bench/trainer_throughput.py args]
# Uses the machine's Python if it already has a CUDA torch with the pinned stack; otherwise makes its own
# venv (.venv-gpu) with the CUDA build of torch and the trainer pins from image/requirements.txt (needs
# a package index: PyPI or PIP_INDEX_URL). Builds a random-init Gemma-3-4B from its config: no download.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3
if ! $PY -c 'import torch, transformers, peft, trl, bitsandbytes; assert torch.cuda.is_available()' 2>/dev/null; then
  [ -x .venv-gpu/bin/python ] || python3 -m venv .venv-gpu
  .venv-gpu/bin/pip install -q --upgrade pip
  .venv-gpu/bin/pip install -q -r image/requirements.txt pydantic pyyaml
  PY=.venv-gpu/bin/python
fi
$PY -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))'
exec timeout 480 $PY bench/trainer_throughput.py --gpu --repeats 5 --steps 6 --workdir "${TMPDIR:-/tmp}" --json "${OUT:-.}/gpu-bench.json" "$@"
