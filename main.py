"""Cloud Functions entry points (functions-framework targets) and the `raytune` CLI.

Kept light on purpose: no torch, ray, transformers, trl or peft on this import path.
"""

import sys

import functions_framework

from functions.handlers import launch as launch_handler
from functions.handlers import watch as watch_handler


@functions_framework.cloud_event
def launch(event):
    """A run config uploaded to the bucket (storage finalize) or a launch message (Pub/Sub)."""
    launch_handler.handle(event)


@functions_framework.cloud_event
def watch(event):
    """Scheduler ticks, trainer completion notices and cancel requests (Pub/Sub)."""
    watch_handler.handle(event)


if __name__ == "__main__":
    from functions.cli import main

    sys.exit(main())
