"""A run's story as the console tells it, the same wherever it is followed: in the foreground of `raytune local`,
and by `raytune logs` and `submit --wait` for any run, local or in the cloud. Fed what is seen of the run at each
look (its record and its driver log so far), `Story.observe` returns the new lines: the job's phases and steps,
Ray Train's failure decisions, one line per change of state or reason, each new attempt. The end state is said
once, by `summary`; the exit code says it too (EXIT_CODES)."""

from __future__ import annotations

from functions.core import joblog
from functions.core.result import Phase, Progress, TrackedRun
from functions.core.runs import RunRecord, State
from functions.core.sweep import trial_lines

# What a command that follows a run to its end exits with (README, "Cheat-sheet").
EXIT_CODES = {State.SUCCEEDED: 0, State.SKIPPED: 0, State.FAILED: 1, State.REJECTED: 2, State.CANCELLED: 3}
ORPHANED = 4  # a local run whose raytune local is gone: it will not end by itself (`raytune cancel` settles it)
STOPPED_FOLLOWING = 130  # Ctrl-C while following: the run goes on
SHOWN_PHASE_S = 0.05  # a phase shorter than this says nothing (it rounds to 0.0 s)
QUIET_S = 20.0  # while something is starting or waiting, at most this long passes without a line


def exit_code(state: State) -> int:
    return EXIT_CODES.get(state, 1)


def progress_line(event: Progress) -> str:
    if event.stopped_early:  # a decision, not a crash: said once, with why
        return f"{event.trial or 'the trial'} stopped early at step {event.step} ({event.stopped_early})"
    parts = [event.trial] if event.trial else []
    parts.append(f"step {event.step}/{event.max_steps}")
    if event.epoch is not None:
        parts.append(f"epoch {event.epoch:.2f}")
    if event.loss is not None:
        parts.append(f"loss {event.loss:.4f}")
    if event.eval_loss is not None:
        parts.append(f"eval loss {event.eval_loss:.4f}")
    if event.eta_s is not None:
        parts.append(f"ETA {event.eta_s:.0f}s")
    return " · ".join(parts)


class Story:
    def __init__(self) -> None:
        self.said: tuple[State, str | None] | None = None
        self.job: str | None = None
        self.moves = 0  # the region moves said
        self.last_line_at: float | None = None  # the follower's clock (`now`) when it was last told something
        self.state_since: float | None = None
        self._new_job()

    def _new_job(self) -> None:
        self.log_seen = 0
        # (trial, step, an evaluation, a stop) said already: a restarted worker retrains steps after its checkpoint
        self.steps: set[tuple[str | None, int, bool, bool]] = set()
        # (trial, phase) begun, with the follower's clock when first seen; ended
        self.opened: dict[tuple[str | None, str], float | None] = {}
        self.closed: set[tuple[str | None, str]] = set()
        self.failures = 0

    def observe(self, record: RunRecord, log: str = "", now: float | None = None) -> list[str]:
        """The new lines of what is seen now. `now`, a follower's monotonic clock, lets a quiet stretch be told:
        after QUIET_S without a line, the phase still under way (or the state still waited in) and how long."""
        told = self._observe(record, log, now)
        if now is not None:
            if told or self.last_line_at is None:
                self.last_line_at = now
            elif now - self.last_line_at >= QUIET_S and (still := self._still(record, now)):
                told, self.last_line_at = [still], now
        return told

    def _still(self, record: RunRecord, now: float) -> str | None:
        """What a quiet run is doing: the phase begun last and not ended, else the state it waits in."""
        under_way = [(key, at) for key, at in self.opened.items() if key not in self.closed and at is not None]
        if record.state == State.RUNNING:
            if not under_way:
                return None
            (trial, phase), at = under_way[-1]
            return f"  {_named(trial, phase)}... {now - at:.0f}s so far"
        if record.state.terminal or self.state_since is None:
            return None
        return f"  still {record.state.value} after {now - self.state_since:.0f}s"  # before it runs

    def _observe(self, record: RunRecord, log: str, now: float | None) -> list[str]:
        if self.said is None or self.said[0] != record.state:
            self.state_since = now
        lines: list[str] = []
        new_job = record.job_name != self.job
        if new_job:
            if self.job is not None or record.attempt > 1:
                by = f" ({record.current.by})" if record.attempt > 1 else ""
                lines.append(f"attempt {record.attempt}: RayJob {record.job_name}{by}")
            self.job = record.job_name
            self._new_job()
        moved = len(record.placements) - 1 > self.moves
        for left, to in list(zip(record.placements, record.placements[1:], strict=False))[self.moves :]:
            lines.append(f"run {record.run_id}: moved from {left.region} to {to.region} ({left.why})")
            self.moves += 1
        lines += self._state_line(record, new_job or moved)
        return lines + self._from_job_log(record, log, now)

    def _state_line(self, record: RunRecord, afresh: bool) -> list[str]:
        """A change of state is said with the run's name; a new reason in the same state (a SUBMITTED job that now
        waits for capacity) is said under it, not as the state again."""
        said, self.said = self.said, (record.state, record.reason)
        if record.state.terminal or (record.state, record.reason) == said:
            return []
        if said is not None and said[0] == record.state and not afresh:
            return [f"  {record.reason}"] if record.reason else []
        return [f"run {record.run_id}: {record.state.value}" + (f" ({record.reason})" if record.reason else "")]

    def _from_job_log(self, record: RunRecord, log: str, now: float | None) -> list[str]:
        lines: list[str] = []
        if len(log) < self.log_seen:  # cut or replaced (the kept copy for the live one): read again, said once
            self.log_seen = 0
        # Whole lines only: a live log is read while Ray still writes it, and a line cut at the end of one look
        # is read whole at the next (its marker and JSON are in its first part, its end in the second).
        fresh = log[self.log_seen :]
        fresh = fresh[: fresh.rfind("\n") + 1]
        lines += self._from_log(fresh, now)
        self.log_seen += len(fresh)
        failures = list(joblog.failed_attempts(log))  # the whole log: a decision may span two looks
        stopping = record.cancel_requested or record.state == State.CANCELLED  # the stop's own effects on workers
        lines += [] if stopping else [f"  {failure}" for failure in failures[self.failures :]]
        self.failures = max(self.failures, len(failures))
        return lines

    def _from_log(self, fresh: str, now: float | None) -> list[str]:
        events = list(joblog.progress(fresh))
        ended_here = {(e.trial, e.phase) for e in events if isinstance(e, Phase) and e.seconds is not None}
        lines = []
        for event in events:
            if isinstance(event, Progress):
                key = (event.trial, event.step, event.eval_loss is not None, event.stopped_early is not None)
                if key not in self.steps:
                    self.steps.add(key)
                    lines.append("  " + progress_line(event))
                continue
            phase = (event.trial, event.phase)
            if event.seconds is None:
                if phase not in ended_here and phase not in self.opened:
                    self.opened[phase] = now
                    lines.append(f"  {_named(*phase)}...")
            elif phase not in self.closed:
                self.closed.add(phase)
                if event.seconds >= SHOWN_PHASE_S:
                    lines.append(f"  {_named(*phase)}: {event.seconds:.1f}s")
        return lines


def summary(record: RunRecord, wall_s: float | None = None, record_path: str | None = None) -> list[str]:
    """How the run ended, once: its state and why (unless it succeeded), then what it made."""
    took = f" in {wall_s:.1f}s" if wall_s is not None else ""
    why = f": {record.reason}" if record.reason and record.state != State.SUCCEEDED else ""
    lines = [f"run {record.run_id} {record.state.value}{took}{why}"]
    if record.attempt > 1:
        lines.append(f"  attempts         {record.attempt}")
    if record.placements:
        lines.append(f"  regions          {where(record)}")
    result = record.result
    if result is not None:
        metrics = result.metrics
        if result.adapter_path:
            lines.append(f"  adapter          {result.adapter_path}")
        if result.best_checkpoint:
            score = (
                f" ({metrics.best_checkpoint_by} {metrics.best_checkpoint_score:.4f})"
                if metrics.best_checkpoint_score is not None
                else ""
            )
            lines.append(f"  best checkpoint  {result.best_checkpoint}{score}")
        if result.evaluation is not None:
            e = result.evaluation
            against = f"champion {e.champion_run_id}" if e.champion_run_id else "base model"
            lines.append(
                f"  evaluation       {e.samples} held-out samples, challenger / {against}: "
                + ", ".join(
                    f"{m} {_num(getattr(e.challenger, m))} / {_num(getattr(e.baseline, m))}"
                    for m in ("eval_loss", "rougeL", "bleu")
                )
            )
            lines.append(f"  report           {e.report_path}")
        if result.sweep is not None:
            lines += trial_lines(result.sweep)
        if metrics.tokens_per_second:
            lines.append(
                f"  throughput       {metrics.tokens_per_second:.0f} tokens/s, "
                f"{metrics.global_step} steps in {metrics.train_runtime_seconds or 0:.1f}s of training"
            )
    if record.promotion:
        lines.append(f"  champion         {record.promotion.describe()}")
    if result is not None:
        lines += tracking_lines(result.tracking)
    if record.gpu_node_seconds:
        cost = f" (cost {record.cost:.2f})" if record.cost else ""
        lines.append(f"  GPU node-hours   {record.gpu_node_seconds / 3600:.2f}{cost}")
    if record_path:
        lines.append(f"  record           {record_path}")
    return lines


def tracking_lines(runs: dict[str, TrackedRun]) -> list[str]:
    """Where the run is tracked (its page, or the command that opens a local store), and, once, what a
    destination did not get."""
    lines = []
    for name, run in runs.items():
        if run.run_id is None:
            lines.append(f"  {name:<16} not tracked: {run.error}")
            continue
        if run.url:
            lines.append(f"  {name:<16} {run.url}")
        elif run.uri and run.uri.startswith("sqlite:"):
            lines.append(f"  {name:<16} run {run.run_id}; to see it: mlflow ui --backend-store-uri {run.uri}")
        else:
            lines.append(f"  {name:<16} run {run.run_id}")
        if run.undelivered:
            lines.append(f"  {name}: {run.undelivered} of {run.points} metric points were not delivered: {run.error}")
    return lines


def where(record: RunRecord) -> str:
    """The regions a run that moved went through: how long it waited in each it left, and where it is."""
    stays = [
        # Whole seconds cut as the move's own line cuts them ("waited 21s" in both, never 21 then 22)
        f"{p.region} (waited {int((p.until - p.since).total_seconds())}s)" if p.until else p.region
        for p in record.placements
    ]
    return " -> ".join(stays)


def _named(trial: str | None, phase: str) -> str:
    return f"{trial} · {phase}" if trial else phase


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
