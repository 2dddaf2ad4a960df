"""The toolkit's commands, each a Hydra app: train, evaluate, translate and export (console scripts nmt-train,
nmt-evaluate, nmt-translate and nmt-export; `python train.py` ... in a checkout, `python export.py`)."""

import contextlib
import dataclasses
import difflib
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path


def quiet_interrupt(kind, value, trace) -> None:
    """sys.excepthook for the commands: a Ctrl-C that reaches no handler of ours (while the command still starts:
    imports, Hydra composing its config) ends in one line, not Python's traceback; Python then ends the process by
    SIGINT as it does after any KeyboardInterrupt (a shell reads 130). Every other exception is Python's to print.
    Set before this module imports Hydra: a Ctrl-C as a sweep's `python -m nmt.cli.train` still imports its
    libraries ends in this line too (measured: a traceback from runpy under load)."""
    if issubclass(kind, KeyboardInterrupt):
        print("stopped by Ctrl-C as the command started; no training or decoding had begun", file=sys.stderr)
        return
    sys.__excepthook__(kind, value, trace)


sys.excepthook = quiet_interrupt


# ruff: noqa: E402 (the libraries after the hook: a Ctrl-C while they import ends in one line)
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException, ValidationError

from nmt import UserError, paths
from nmt.config import CONFIGS


@contextlib.contextmanager
def imports_whole():
    """Ctrl-C held while a command imports its libraries (torch, numpy, scipy), then given to the handler it would
    have reached (Python's KeyboardInterrupt, or a sweep's own, which notes it and lets its jobs save): one that lands
    inside an extension module's import leaves it half made, and the next import of it fails with an ImportError or
    a RecursionError instead of stopping. In the main thread only, where signals arrive."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: noted.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if noted and callable(previous):
        previous(signal.SIGINT, noted[0])  # Python's default_int_handler raises KeyboardInterrupt
    elif noted and previous == signal.SIG_DFL:
        raise KeyboardInterrupt


def wait_policy() -> None:
    """OpenMP's worker threads wait by spinning (GNU's default): on a machine where another process wants a core,
    a two-thread run then waits on its descheduled twin at every parallel region. Measured on 2 cores, the demo's
    training beside one busy process took 3.3-4.2x its time alone spinning, 1.3x sleeping (OMP_WAIT_POLICY=PASSIVE),
    which alone costs 1.6-2.2x. So each command starts sleeping where others use the CPU as it starts, spinning
    where not; the numbers are the same either way (the wait policy changes no sum). Set before torch loads (an
    OMP_WAIT_POLICY given by the user wins); a machine that becomes busy later keeps the policy it started with."""
    if "OMP_WAIT_POLICY" in os.environ or os.environ.get("OMP_NUM_THREADS") == "1" or "torch" in sys.modules:
        return
    if others_busy():
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


def others_busy(seconds: float = 0.05) -> bool:
    """Whether other processes keep the CPUs busy now: more than one runnable task (/proc/loadavg), and more than a
    quarter of the CPU time over `seconds` spent at normal priority (a niced process, like the study's queue, yields
    at once and does not count)."""

    def times() -> list[int]:
        return [int(field) for field in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]

    try:
        if int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]) <= 1:
            return False
        before = times()
        time.sleep(seconds)
        spent = [after - then for after, then in zip(times(), before)]
    except (OSError, ValueError, IndexError):
        return False
    user, system = spent[0], spent[2]  # spent[1]: niced processes, left out
    return sum(spent) > 0 and (user + system) / sum(spent) > 0.25


wait_policy()


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's, `kill`'s), met as Ctrl-C is: what was being made is left unwritten."""


def terminated(number, frame):
    raise Terminated


@contextlib.contextmanager
def refusals_and_ctrl_c(unwritten: str, task: DictConfig | None = None):
    """A decoding or export command's ending: a refusal (a UserError, or an option OmegaConf rejects) is one `error:`
    line, and Ctrl-C or SIGTERM says that nothing was written (files are written whole at the end, atomically;
    nmt-export's folder is made beside its place and removed: `unwritten` names them)."""
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        if HydraConfig.initialized() and task is not None:
            check_appended(task, list(HydraConfig.get().overrides.task), CONFIGS)
        yield
    except (UserError, OmegaConfBaseException) as error:
        sys.exit(f"error: {said(error)}")
    except KeyboardInterrupt as stop:
        by = "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C"
        wrote = ", ".join(map(str, paths.PUT_IN_PLACE))
        done = f"after it wrote {wrote}" if paths.PUT_IN_PLACE else f"no {unwritten} were written"
        print(f"stopped by {by}; {done}", file=sys.stderr)
        sys.exit(143 if isinstance(stop, Terminated) else 130)
    finally:
        signal.signal(signal.SIGTERM, previous)


def check_appended(config: DictConfig, overrides: list[str], configs: Path) -> None:
    """A `+key=value` that adds a key its options lack (`+trainer.max_step=5`, a typo of max_steps) refused as an
    unknown key is: Hydra's `+` adds a key to any node, and the run would ignore it. Config groups (`+experiment=`)
    and Hydra's own keys are left to Hydra."""
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if not override.startswith("+") or key.startswith("hydra.") or "/" in key or (configs / key).is_dir():
            continue
        parent, _, name = key.rpartition(".")
        node = OmegaConf.select(config, parent) if parent else config
        schema = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
        if schema is None or not dataclasses.is_dataclass(schema):
            continue
        known = [field.name for field in dataclasses.fields(schema)]
        if name not in known:
            close = difflib.get_close_matches(name, known, 1)
            meant = f" (did you mean {parent + '.' if parent else ''}{close[0]}?)" if close else ""
            raise UserError(f"{override}: {key} is no option{meant}; `--help` lists every option with its default")


def said(error: Exception, named: bool = True) -> str:
    """A refusal in one line: OmegaConf's own message without the full_key/object_type lines it appends, a missing
    option named with how to give it, and a null given to an option that takes none said so (`named`: with the
    option's name, where the line does not begin with the override already)."""
    if isinstance(error, MissingMandatoryValue) and getattr(error, "full_key", None):
        return f"{error.full_key}: required; give it on the command line ({error.full_key}=...)"
    text = str(error)
    if isinstance(error, ValidationError) and "is not Optional" in text and getattr(error, "full_key", None):
        name = f"{error.full_key}=null: " if named else ""
        return f"{name}this option needs a value; leave it out for its default (`--help` lists it)"
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
    one_line_refusals()


def one_line_refusals() -> None:
    """An override Hydra cannot parse or merge (`seed=1.5`, `beam=abc`, `check=null`) refused in one `error:` line
    naming the option, where Hydra prints five (its message, full_key, object_type, a hint on HYDRA_FULL_ERROR, which
    still gives the whole trace)."""
    from hydra._internal import utils
    from hydra.errors import ConfigCompositionException, OverrideParseException

    run_and_report = utils.run_and_report
    if getattr(run_and_report, "one_line", False):
        return

    def refused(func):
        try:
            return func()
        except (ConfigCompositionException, OverrideParseException) as error:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            raise SystemExit(f"error: {override_refusal(error)}") from None

    def reported(func):
        return run_and_report(lambda: refused(func))

    reported.one_line = True
    utils.run_and_report = reported


def override_refusal(error: Exception) -> str:
    """Hydra's refusal of an override in one line: the option, then what is wrong and what to give instead."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("full_key:", "object_type=", "Set the environment"))]
    text = " ".join(lines)
    if merging := re.match(r"Error merging override (\S+)", text):
        return f"{merging[1]}: " + ("; ".join(lines[1:]) or said(error.__cause__ or error, named=False))
    if unknown := re.search(r"Could not override '([^']+)'", text):
        help_line = f"{Path(sys.argv[0]).name} --help"
        return f"{unknown[1]}: no such option; {help_line} lists every option with its default"
    if group := re.search(
        r"Could not find '([^']+)/([^']+)'.*?Available options in '[^']+':(.*?)(Config search|$)", text
    ):
        options = ", ".join(group[3].split())
        return f"{group[1]}={group[2]}: no such option of {group[1]}; choose one of {options}"
    if "no viable alternative" in text or "mismatched input" in text or "extraneous input" in text:
        return f"an override could not be read ({lines[0]}); write key=value, quoting a value with spaces or brackets"
    return "; ".join(lines) or type(error).__name__


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
