"""The toolkit's three commands, each a Hydra app: train, evaluate and translate (console scripts nmt-train,
nmt-evaluate and nmt-translate; `python train.py` ... in a checkout)."""

import contextlib
import sys

from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from nmt import UserError


@contextlib.contextmanager
def refusals_and_ctrl_c(unwritten: str):
    """A decoding command's ending: a refusal (a UserError, or an option OmegaConf rejects) is one `error:` line, and
    Ctrl-C says that nothing was written (files are written whole at the end, atomically: `unwritten` names them)."""
    try:
        yield
    except (UserError, OmegaConfBaseException) as error:
        sys.exit(f"error: {said(error)}")
    except KeyboardInterrupt:
        print(f"stopped by Ctrl-C; no {unwritten} were written", file=sys.stderr)
        sys.exit(130)


def said(error: Exception) -> str:
    """A refusal in one line: OmegaConf's own message without the full_key/object_type lines it appends, and a
    missing option named with how to give it."""
    if isinstance(error, MissingMandatoryValue) and getattr(error, "full_key", None):
        return f"{error.full_key}: required; give it on the command line ({error.full_key}=...)"
    text = str(error)
    return text.splitlines()[0] if isinstance(error, OmegaConfBaseException) and text else text
