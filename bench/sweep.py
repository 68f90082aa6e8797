"""A sweep's overhead on the local default: the shipped 4-trial sweep (examples/quickstart-sweep.json: ASHA, 2 at
once), the same sweep with no early stopping (the same work as the runs), and the same 4 configs run one after
another by `raytune local` (each with the trial's drawn values, no sweep), interleaved in one run (the order
rotates each round). Reported min / median / max: wall time and the CPU time of every process each started
(bench/local_e2e.py's meter: a cpuacct cgroup where one can be made, else the machine's busy time).

    .venv/bin/python bench/sweep.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_e2e import cpu_meter, raytune_local, table

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "examples" / "quickstart-sweep.json"


def local(configs: list[Path]) -> dict:
    """`raytune local` of each config in turn, in one workdir (as a user runs them one after another)."""
    with tempfile.TemporaryDirectory() as workdir, tempfile.TemporaryDirectory() as home, cpu_meter() as (cpu, join):
        env = {**os.environ, "HOME": home, "PYTHONPATH": str(ROOT)}
        started = time.monotonic()
        records = []
        for config in configs:
            proc = raytune_local([str(config), "--workdir", workdir, "--json"], env, home, stderr=subprocess.PIPE)
            join(proc.pid)
            out, err = proc.communicate(timeout=1800)
            if proc.returncode != 0:
                raise SystemExit(f"{config} failed:\n{err[-4000:]}")
            records.append(json.loads(out))
        wall = time.monotonic() - started
    trained = sum(r["result"]["metrics"].get("global_step") or 0 for r in records)
    sweep = records[0]["result"].get("sweep") if len(records) == 1 else None
    stopped = 0
    if sweep:  # a trial stopped early trained to its last evaluation
        trained = sum(int(t["history"][-1]["step"]) for t in sweep["trials"] if t["history"])
        stopped = sum(t["state"] == "stopped" for t in sweep["trials"])
    return {"wall_s": wall, **cpu, "steps trained": trained, "trials stopped early": stopped, "_records": records}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    base = json.loads(SWEEP.read_text())
    folder = Path(tempfile.mkdtemp(prefix="raytune-bench-sweep-"))
    no_stop = folder / "quickstart-sweep.json"
    no_stop.write_text(json.dumps({**base, "sweep": {**base["sweep"], "scheduler": "none"}}))
    arms = {"sweep (shipped: ASHA, 2 at once)": [SWEEP], "sweep, no early stop": [no_stop]}
    samples: dict[str, list[dict]] = {name: [] for name in [*arms, "4 runs one after another"]}
    for round_ in range(args.runs):
        order = list(samples)
        order = order[round_ % len(order) :] + order[: round_ % len(order)]
        for name in order:
            if name not in arms:  # the drawn values (seeded: the same each round), from round 1's sweep before it
                arms[name] = runs_of(samples["sweep, no early stop"][0]["_records"][0], base, folder)
            samples[name].append(local(arms[name]))
            shown = {k: v for k, v in samples[name][-1].items() if not k.startswith("_")}
            print(f"round {round_ + 1} {name}: {shown}", flush=True)
    for runs in samples.values():
        for run in runs:
            run.pop("_records", None)
    print(f"\na 4-trial sweep against its 4 configs run one after another, {args.runs} rounds interleaved (seconds)")
    print("\n".join(table(samples)))
    return 0


def runs_of(record: dict, base: dict, folder: Path) -> list[Path]:
    """The sweep's trials as plain configs: the run's config with each trial's values and no sweep."""
    paths = []
    for number, trial in enumerate(record["result"]["sweep"]["trials"]):
        config = {key: value for key, value in base.items() if key != "sweep"}
        for dotted, value in trial["params"].items():
            section, field = dotted.split(".")
            config[section] = {**config.get(section, {}), field: value}
        path = folder / f"trial-{number}" / "quickstart-sweep.json"
        path.parent.mkdir()
        path.write_text(json.dumps(config))
        paths.append(path)
    return paths


if __name__ == "__main__":
    sys.exit(main())
