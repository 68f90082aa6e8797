"""Driver logs for people: progress events and a failure's root cause, from log text as Ray writes it."""

from functions.core.joblog import clean, progress, root_cause

FAILED_LOG = """\
\x1b[36m(TrainController pid=4242)\x1b[0m Attempting to start training worker group of size 2
\x1b[36m(RayTrainWorker pid=4301, ip=127.0.0.1)\x1b[0m Traceback (most recent call last):
\x1b[36m(RayTrainWorker pid=4301, ip=127.0.0.1)\x1b[0m   File "/code/trainer/data.py", line 45, in load
\x1b[36m(RayTrainWorker pid=4301, ip=127.0.0.1)\x1b[0m FileNotFoundError: Unable to find '/data/products.parquet'
Traceback (most recent call last):
  File "/code/trainer/train.py", line 300, in run
ray.train.v2.api.exceptions.TrainingFailedError: Training failed due to worker errors:
[Rank 0 Error Snippet]: FileNotFoundError: Unable to find '/data/products.parquet'
"""


def test_root_cause_is_the_innermost_exception_without_prefixes_or_colours():
    assert root_cause(FAILED_LOG) == "FileNotFoundError: Unable to find '/data/products.parquet'"


def test_root_cause_falls_back_to_the_wrapper_and_is_short():
    assert root_cause("ray.exceptions.RayTaskError: boom") == "RayTaskError: boom"
    assert len(root_cause("ValueError: " + "x" * 1000)) == 300
    assert root_cause("all fine\n") is None


def test_preflight_errors_read_as_they_are():
    log = "trainer.preflight.PreflightError: dataset /x/y.parquet does not exist\n"
    assert root_cause(log) == "PreflightError: dataset /x/y.parquet does not exist"


def test_reasons_carry_no_ray_decorations_module_paths_or_addresses():
    """Issue 40: `PIL.UnidentifiedImageError: ... <_io.BytesIO object at 0x...> [repeated 2x across cluster]`."""
    log = (
        "(RayTrainWorker pid=7, ip=10.0.0.3) PIL.UnidentifiedImageError: cannot identify image file "
        "<_io.BytesIO object at 0x7f3a2c1b9e50> [repeated 2x across cluster]\n"
    )
    assert root_cause(log) == "UnidentifiedImageError: cannot identify image file <_io.BytesIO>"
    assert root_cause("ray.exceptions.RayTaskError(ValueError): bad\n") == "RayTaskError(ValueError): bad"


def test_progress_events_survive_prefixes_and_cut_lines():
    text = (
        '\x1b[36m(RayTrainWorker pid=1, ip=127.0.0.1)\x1b[0m RAYTUNE_PROGRESS {"step": 2, "max_steps": 12, "loss": 2.5}\n'
        'RAYTUNE_PROGRESS {"step": 6, "max_steps": 12, "eval_loss": 2.1, "epoch": 1.0}\n'
        'RAYTUNE_PROGRESS {"step": 8, "max_st'
    )
    events = list(progress(text))
    assert [(e.step, e.loss, e.eval_loss) for e in events] == [(2, 2.5, None), (6, None, 2.1)]


def test_clean():
    assert clean("\x1b[33m(raylet)\x1b[0m [2026-12-02 10:00:00,1 E 1 2] oops") == "oops"


def test_a_side_threads_noise_is_never_the_root_cause():
    """Issue 23: a run that failed on bad parquet was reported as Ray Train's placement-group cleaner meeting
    another local cluster."""
    text = (
        "Traceback (most recent call last):\n"
        "pyarrow.lib.ArrowInvalid: Parquet magic bytes not found in footer\n"
        "(PlacementGroupCleaner pid=9) ConnectionError: Found multiple active Ray instances: {'127.0.0.1:6379', "
        "'127.0.0.1:41234'}\n"
    )
    assert root_cause(text) == "ArrowInvalid: Parquet magic bytes not found in footer"


def test_each_failed_worker_group_is_one_line_with_its_cause():
    """Issue 23: after RUNNING the console said nothing for minutes while Ray Train's restarts failed."""
    from functions.core.joblog import failed_attempts

    text = (
        "(TrainController pid=41) [FailurePolicy] RETRY\n"
        "(TrainController pid=41)   Source: worker group\n"
        "(TrainController pid=41)   Error count: 1 (max allowed: 2)\n"
        "(TrainController pid=41) Error: Training failed due to worker errors:\n"
        "(TrainController pid=41) Traceback (most recent call last):\n"
        "(TrainController pid=41) ray.exceptions.RayTaskError(AttributeError): ray::train_fn()\n"
        "(TrainController pid=41) AttributeError: 'dict' object has no attribute 'convert'\n"
        "(TrainController pid=41) [FailurePolicy] RAISE\n"
        "(TrainController pid=41)   Source: worker group\n"
        "(TrainController pid=41)   Error count: 3 (max allowed: 2)\n"
        "(TrainController pid=41) Error: Training failed due to worker errors:\n"
        "(TrainController pid=41) AttributeError: 'dict' object has no attribute 'convert'\n"
    )
    assert list(failed_attempts(text)) == [
        "worker group failure 1 (at most 2 restarts): AttributeError: 'dict' object has no attribute 'convert'; "
        "restarting from the last checkpoint",
        "worker group failure 3 (at most 2 restarts): AttributeError: 'dict' object has no attribute 'convert'; "
        "giving up",
    ]
