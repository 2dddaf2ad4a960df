"""nmt: the classic encoder-decoder families for neural machine translation, side by side.

The toolkit lies in wings along the data's path, each importing only those below it (tests/test_layout.py):
models/ (the families and their attention), config.py, text/ (corpora to batches), build.py, runs/ (a run's folder,
checkpoints, resuming), decoding/ (translation, search, evaluation, the export), training/ (one run's loop), launch/
(a run started, packed or swept) and cli/ (the commands), on a ground floor of device.py, distributed.py,
metrics.py and paths.py. The study (nmt_study, with its own extra) lives beside the toolkit, which never imports it.

Here: what every wing raises, and the signal that stopped a sweep.
"""


class UserError(Exception):
    """A mistake in the user's input (a path, an option, a corpus) that the message explains how to fix.

    The command-line entry points print the message and exit non-zero instead of showing a traceback.
    """


class Interrupted(Exception):
    """A run stopped by a signal (Ctrl-C, a scheduler's SIGTERM) after saving what it had; the commands exit with
    128 + the signal's number, as a shell does."""

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.signal_number = signal_number


class NonFiniteLoss(Exception):
    """The training loss became NaN or infinite; the trainer turns it into a UserError naming the last good
    checkpoint (no checkpoint is ever written with non-finite weights)."""


class SweepStop:
    """The signal that stopped this process's sweep (0: none). A job of `train.py -m` that a signal interrupts
    saves its run and returns to Hydra instead of exiting, and sets it; a job that starts after it does not train, and
    one that it reached in its setup stops at its first update. A joblib worker that exited would have its siblings
    killed, maybe inside a checkpoint's write (nmt.launch.multirun.FailedJobs)."""

    signal_number = 0

    @staticmethod
    def note(signal_number: int, frame) -> None:
        SweepStop.signal_number = signal_number
