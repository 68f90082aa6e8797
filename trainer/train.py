"""The RayJob entrypoint: `python -m trainer.train --run-id ID --config-json JSON` (or --config FILE). It only
chooses: one Ray Train run of the config (trainer/fit.py) or a sweep of trials (trainer/sweep.py), after the
checks no retry can fix (trainer/preflight.py); then a completion notice on the watch topic, so the controller
scales the GPUs down at once. What it leaves is the run folder (functions/core/result.py): checkpoints through Ray
Train (a restarted worker group resumes from the latest), the final adapter and result.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import NoReturn

from functions.core import release
from functions.core.config import RunConfig
from functions.core.result import CHAMPION_ENV, TRIAL_DRIVER_RESOURCE, TRIAL_DRIVERS, RunResult
from trainer import fit as one_fit
from trainer.codehash import ROOT, code_files, code_sha256

log = logging.getLogger("raytune.trainer")
CODE_WAIT_S = 180  # kubelet refreshes ConfigMap volumes within about a minute
NOTICE_TIMEOUT_S = 30
DEDUP_LOGS_ENV = "RAY_DEDUP_LOGS"


def check_code(expected: str | None, root: Path = ROOT, wait_s: float = CODE_WAIT_S) -> None:
    """Refuse to train on other code than the controller submitted (a ConfigMap volume not yet updated)."""
    if not expected:
        return
    deadline = time.monotonic() + wait_s
    while (actual := code_sha256(code_files(root))) != expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"code under {root} has sha256 {actual}, the RayJob expects {expected}")
        time.sleep(5)


def notify(run_id: str, outcome: str) -> None:
    """Tell the watcher the job is ending, so it reconciles (and scales down) now, not at the next tick."""
    topic = os.environ.get("RAYTUNE_WATCH_TOPIC")
    if not topic:
        return
    try:
        from google.cloud import pubsub_v1

        message = json.dumps({"kind": "finished", "run_id": run_id, "outcome": outcome}).encode()
        pubsub_v1.PublisherClient().publish(topic, message).result(timeout=NOTICE_TIMEOUT_S)
    except Exception as exc:
        log.warning("completion notice to %s failed: %s", topic, exc)


def run(cfg: RunConfig, run_id: str) -> RunResult:
    import ray

    from trainer import preflight, progress

    started = time.monotonic()
    timeline = progress.Timeline()
    with timeline.phase("preflight"):
        preflight.check(cfg.model, cfg.dataset)
    with timeline.phase("connecting to Ray"):
        # A cluster of this product's has its head advertise the trial drivers' resource; one Ray starts here for
        # this job alone (no RAY_ADDRESS: `python -m trainer.train` by hand) is given it too.
        own = {} if os.environ.get("RAY_ADDRESS") else {"resources": {TRIAL_DRIVER_RESOURCE: TRIAL_DRIVERS}}
        ray.init(ignore_reinit_error=True, log_to_driver=True, **own)
    if cfg.scaling.use_gpu:
        with timeline.phase("checking the GPU driver"):
            preflight.gpu_driver_check(cfg.scaling, one_fit.run_folder(cfg, run_id))
    os.environ.setdefault(one_fit.PRINT_PATCH_ENV, "0")
    # The champion to warm-start from and evaluate against: the driver's environment, not every worker's.
    champion = json.loads(os.environ[CHAMPION_ENV]) if os.environ.get(CHAMPION_ENV) else None
    if cfg.sweep is not None:
        from trainer import sweep

        summary = sweep.run(cfg, run_id, champion, timeline)
    else:
        summary = one_fit.fit(cfg, run_id, champion, timeline)
    summary.wall_seconds = time.monotonic() - started
    one_fit.write_result(summary, cfg, run_id)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trainer.train", description=__doc__)
    parser.add_argument("--version", action="version", version=f"raytune trainer {release.VERSION}")
    parser.add_argument("--run-id", required=True)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config-json")
    source.add_argument("--config")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.info("raytune trainer %s", release.VERSION)
    cfg = RunConfig.model_validate_json(args.config_json if args.config_json else Path(args.config).read_text())
    if not cfg.storage_path:
        parser.error("the config has no storage_path (the controller fills it in)")
    check_code(os.environ.get("RAYTUNE_CODE_SHA256"))
    if cfg.sweep is not None:
        # Ray folds lines that differ only in their numbers into one, so the trials' progress lines would be lost;
        # read when Ray is imported.
        os.environ.setdefault(DEDUP_LOGS_ENV, "0")
    try:
        summary = run(cfg, args.run_id)
    except BaseException:
        notify(args.run_id, "failed")
        raise
    notify(args.run_id, "succeeded")
    print(summary.model_dump_json(indent=2))
    return 0


def leave(code: int) -> NoReturn:
    """The end of a driver whose run is over: Ray disconnected and every stream flushed, then out without the
    interpreter's teardown of torch and the rest of the ML stack (1.3 s of a driver's 1.7 s exit here, which the
    job's end waits for). A run that raised leaves the usual way, with its traceback."""
    import ray

    ray.shutdown()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main())
