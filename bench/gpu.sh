#!/usr/bin/env bash
# The trainer benchmark on one GPU (H200 or B200). Each arm loads the 4B checkpoint anew every repeat: on an
# H200 five repeats of every arm took more than 8 minutes (the first try, cut at 480 s, printed no table), so
# every run is printed as it ends, and `--arms`/`--repeats` make a run fit a shorter lease:
#   bash bench/gpu.sh [extra bench/trainer_throughput.py args]
# Uses the machine's Python if it already has a CUDA torch with what --gpu imports; otherwise makes its own
# venv (.venv-gpu) with the CUDA build of torch and the trainer pins from image/requirements.txt (needs
# a package index: PyPI or PIP_INDEX_URL). Builds a random-init Gemma-3-4B from its config: no download.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3
export TQDM_DISABLE=1 HF_HUB_DISABLE_PROGRESS_BARS=1  # the log is for the measurements, not loading bars
# A machine with no package index: wheels carried in .whl/ (pip download them for its Python) go on the path.
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/bench-site .whl/*.whl
  export PYTHONPATH=/tmp/bench-site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! $PY -c 'import torch, transformers, peft, bitsandbytes, pydantic; assert torch.cuda.is_available()' 2>/dev/null; then
  [ -x .venv-gpu/bin/python ] || python3 -m venv .venv-gpu
  .venv-gpu/bin/pip install -q --upgrade pip
  .venv-gpu/bin/pip install -q -r image/requirements.txt pydantic pyyaml
  PY=.venv-gpu/bin/python
fi
$PY -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))'
exec timeout 540 $PY bench/trainer_throughput.py --gpu --repeats 5 --steps 6 --workdir "${TMPDIR:-/tmp}" --json "${OUT:-.}/gpu-bench.json" "$@"
