"""The toolkit's three commands, each a Hydra app: train, evaluate and translate (console scripts nmt-train,
nmt-evaluate and nmt-translate; `python train.py` ... in a checkout)."""

import contextlib
import sys

from omegaconf.errors import OmegaConfBaseException

from nmt import UserError


@contextlib.contextmanager
def refusals_and_ctrl_c(unwritten: str):
    """A decoding command's ending: a refusal (a UserError, or an option OmegaConf rejects) is one `error:` line, and
    Ctrl-C says that nothing was written (files are written whole at the end, atomically: `unwritten` names them)."""
    try:
        yield
    except (UserError, OmegaConfBaseException) as error:
        sys.exit(f"error: {error}")
    except KeyboardInterrupt:
        print(f"stopped by Ctrl-C; no {unwritten} were written", file=sys.stderr)
        sys.exit(130)
