"""The Cloud Functions import path stays light: importing main.py loads no ML stack."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ["torch", "ray", "transformers", "trl", "peft", "bitsandbytes", "datasets", "accelerate"]


def test_main_imports_no_ml_stack():
    probe = f"import sys, json, main; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
