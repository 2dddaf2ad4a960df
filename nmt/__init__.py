"""nmt: the classic encoder-decoder families for neural machine translation, side by side."""


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
