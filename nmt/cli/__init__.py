"""The toolkit's commands, each a Hydra app: train, evaluate, translate and export (console scripts nmt-train,
nmt-evaluate, nmt-translate and nmt-export; `python train.py` ... in a checkout, `python -m nmt.export`)."""

import contextlib
import re
import signal
import sys
from pathlib import Path

from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from nmt import UserError


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's, `kill`'s), met as Ctrl-C is: what was being made is left unwritten."""


def terminated(number, frame):
    raise Terminated


@contextlib.contextmanager
def refusals_and_ctrl_c(unwritten: str):
    """A decoding or export command's ending: a refusal (a UserError, or an option OmegaConf rejects) is one `error:`
    line, and Ctrl-C or SIGTERM says that nothing was written (files are written whole at the end, atomically;
    nmt-export's folder is made beside its place and removed: `unwritten` names them)."""
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    except (UserError, OmegaConfBaseException) as error:
        sys.exit(f"error: {said(error)}")
    except KeyboardInterrupt as stop:
        print(
            f"stopped by {'SIGTERM' if isinstance(stop, Terminated) else 'Ctrl-C'}; no {unwritten} were written",
            file=sys.stderr,
        )
        sys.exit(143 if isinstance(stop, Terminated) else 130)
    finally:
        signal.signal(signal.SIGTERM, previous)


def said(error: Exception) -> str:
    """A refusal in one line: OmegaConf's own message without the full_key/object_type lines it appends, and a
    missing option named with how to give it."""
    if isinstance(error, MissingMandatoryValue) and getattr(error, "full_key", None):
        return f"{error.full_key}: required; give it on the command line ({error.full_key}=...)"
    text = str(error)
    return text.splitlines()[0] if isinstance(error, OmegaConfBaseException) and text else text


# What could set hydra.mode where a command's config comes from: an override, or a key in a config file
MODE_OVERRIDE = re.compile(r"[+~]*hydra\.(mode|searchpath)\b")
MODE_KEY = re.compile(r"^\s*(mode|searchpath)\s*:", re.MULTILINE)
READ_WHOLE = ("pkg://hydra.conf", "structured://")  # Hydra's own files and the ConfigStore: neither sets hydra.mode


def lean_hydra() -> None:
    """Hydra without the work whose result it throws away, in our commands.

    - Each command's config composed once, not twice. Hydra (1.3) composes the whole config a first time only to read
      `hydra.mode` (`Hydra.get_mode`), then again to run (hydra-ecosystem/hydra#3440): a third to a half of a refused
      command's time. Where nothing could set hydra.mode its answer is None (Hydra then goes by `-m`), so our commands
      give that answer without composing, and ask Hydra's own get_mode whenever something could: an override of
      hydra.mode or hydra.searchpath, a config file with a `mode:` or `searchpath:` key in a config folder (ours,
      --config-dir), or a config source that is not a folder (a plugin's package).
    - `--help` lists every config group's options ($APP_CONFIG_GROUPS, $HYDRA_CONFIG_GROUPS) only when the help
      template shows them: Hydra lists them whatever the template, composing a repository per group (3 of train.py
      --help's 4 seconds), and train.py's template lists its groups itself."""
    from hydra._internal.hydra import Hydra

    get_mode, get_help = getattr(Hydra, "get_mode", None), getattr(Hydra, "get_help", None)
    if get_mode is None or get_help is None or getattr(get_mode, "lean", False):
        return

    def lean_get_mode(self, config_name, overrides):
        return get_mode(self, config_name, overrides) if could_set_mode(self, overrides) else None

    def lean_get_help(self, help_cfg, *args, **kwargs):
        if "CONFIG_GROUPS" in str(help_cfg.get("template", "")):
            return get_help(self, help_cfg, *args, **kwargs)
        self.format_config_groups = lambda predicate, compact=True: ""  # this call only: the template omits them
        try:
            return get_help(self, help_cfg, *args, **kwargs)
        finally:
            del self.format_config_groups

    lean_get_mode.lean = True
    Hydra.get_mode, Hydra.get_help = lean_get_mode, lean_get_help


def could_set_mode(hydra, overrides: list[str]) -> bool:
    """Whether an override or a config file Hydra could read for this command might set hydra.mode."""
    if any(MODE_OVERRIDE.match(override) for override in overrides):
        return True
    try:
        sources = [entry.path for entry in hydra.config_loader.get_search_path().get_path()]
    except AttributeError:  # another Hydra: its own answer
        return True
    for source in sources:
        if source in READ_WHOLE:
            continue
        folder = Path(source.removeprefix("file://"))
        if "://" in source.removeprefix("file://") or not folder.is_dir():
            return True
        if any(MODE_KEY.search(path.read_text(errors="replace")) for path in folder.rglob("*.yaml")):
            return True
    return False
