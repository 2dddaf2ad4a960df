"""nmt: the classic encoder-decoder families for neural machine translation, side by side."""


class UserError(Exception):
    """A mistake in the user's input (a path, an option, a corpus) that the message explains how to fix.

    The command-line entry points print the message and exit non-zero instead of showing a traceback.
    """
