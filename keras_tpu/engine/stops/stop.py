"""One stop value: why a run ended before its end decides its exit code, its line and its status.

A run stops early for one of four reasons, in any phase (training, the final
evaluation, `best/`, the export, the summary); each is a `Stop`:

  kind          exit code              summary.json             the one line says
  "signal"      128 + signal (143)     not written: resumable   the phase, what was saved, the rerun
  "nan"         3                      status "nan", the step   the step, the finite backup, the fix
  "disk"        2                      not written: resumable   the path, the space, the fix
  "lost_worker" 2                      not written: resumable   the worker lost, where it resumes

`keras_tpu.fit` raises `RunStopped`, which carries the Stop; the scripts, and a
program of your own, print its one line and exit with its code:

    try:
        summary = keras_tpu.fit(task, config)
    except keras_tpu.RunStopped as stop:
        stop.exit()  # "error: <line>" on stderr, exit 143 / 3 / 2
"""

import dataclasses
import signal
import sys
import threading

KINDS = ("signal", "nan", "disk", "lost_worker")
NAN_EXIT = 3
WRITE_EXIT = 2  # As a configuration error: the fix is on the user's side (space, rights).


@dataclasses.dataclass(frozen=True)
class Stop:
    """Why a run stopped early: its kind, the one line, the exit code, the summary's status.

    Attributes:
      kind: one of KINDS.
      line: the one line saying what happened, what was saved and what to run next.
      exit_code: what a script exits with.
      status: summary.json's "status" when the stop writes a summary ("nan"), else None:
        the others leave a backup to resume from, and no summary (the rerun writes it).
    """

    kind: str
    line: str
    exit_code: int
    status: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Stop kind {self.kind!r}: must be one of {KINDS}.")

    @classmethod
    def signal(cls, signum, line):
        """A SIGTERM/SIGINT (or another worker's), honoured in any phase: exit 128 + signal."""
        return cls("signal", line, 128 + int(signum))

    @classmethod
    def nan(cls, line):
        """A non-finite loss: exit 3 and summary.json's status "nan"."""
        return cls("nan", line, NAN_EXIT, status="nan")

    @classmethod
    def disk(cls, line):
        """A write that failed (a backup, best/, the export: a full disk, no permission): exit 2."""
        return cls("disk", line, WRITE_EXIT)

    @classmethod
    def lost_worker(cls, line):
        """A cluster worker died or stuck during training: exit 2, every worker restarts."""
        return cls("lost_worker", line, WRITE_EXIT)

    def error(self):
        """Return the RunStopped to raise for this stop."""
        return RunStopped(self)


class RunStopped(Exception):
    """The run stopped early (preempted, NaN, a failed write, a lost worker): exit with `exit_code`.

    Attributes:
      stop: the `Stop`: its kind, line, exit code and summary status.
      exit_code: the stop's exit code: 128 + signal (preempted, backed up), 3 (a NaN
        loss), 2 (a write failed, or a cluster worker was lost).
    """

    def __init__(self, stop):
        # The Stop is the exception's one argument: a copy or a pickle (`type(e)(*e.args)`)
        # is this RunStopped again.
        super().__init__(stop)
        self.stop = stop

    def __str__(self):
        return self.stop.line

    @property
    def exit_code(self):
        return self.stop.exit_code

    def exit(self):
        """Print the stop's one line to stderr as `error: <line>` and exit with its code.

        From here the process only exits, and TensorFlow's teardown of a cluster worker
        takes seconds: SIGTERM or SIGINT then is ignored (`exiting_handler`), so the exit
        code stays the stop's and its line the last (an impatient supervisor's second
        SIGTERM had ended a chief with -15 after its backup and its line:
        tests/test_fault_matrix.py).
        """
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, exiting_handler)
        print(f"error: {self}", file=sys.stderr)
        sys.exit(self.exit_code)


_exiting_signals = []


def exiting_handler(signum, frame):
    """The handler while a stopped run's process exits: ignore two signals, die of the third.

    Silent: the stop's line, already printed, stays the process's last.
    """
    del frame
    _exiting_signals.append(signum)
    if len(_exiting_signals) >= 3:  # Not exiting fast enough for the sender: the default way.
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

