"""Cloud Functions entry points (functions-framework targets) and the `raytune` CLI.

Kept light on purpose: no torch, ray, transformers, trl or peft on this import path.
"""

import logging
import sys

import functions_framework
from cloudevents import exceptions as cloudevent_errors

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


@functions_framework.errorhandler(RecursionError)
@functions_framework.errorhandler(cloudevent_errors.GenericException)
def unreadable_request(error):
    """A body no CloudEvent can be read from (nested too deep, not JSON) is as bad on every redelivery:
    acknowledged and logged, never a 5xx that Eventarc or Pub/Sub would retry for a day."""
    logging.getLogger("functions").error("ignored: unreadable request body: %s", type(error).__name__)
    return f"ignored: unreadable request body ({type(error).__name__})", 200


if __name__ == "__main__":
    from functions.cli import main

    sys.exit(main())
