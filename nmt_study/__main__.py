"""The study's one entry: python -m nmt_study PROGRAM [options] (or nmt-study PROGRAM ...).

  compare   train the comparison's variants (make compare) and report on runs: significance, figures, claims
  lab       the alignment lab on the sample grammar: AER against gold links, BLEU by sentence length (make lab)
  results   what README.md and docs/results.md report, trained and recorded part by part (make results)
  measure   speed, memory and calibration measurements: `measure speed` times each model (make bench)
  tune      each family's recipe tuned with equal effort on valid BLEU (Optuna, pruned, resumable)
  queue     the study's design trained in the background, from a worktree of its own (make queue)

`python -m nmt_study PROGRAM --help` lists a program's options.
"""

from __future__ import annotations

import sys
from importlib import import_module
from importlib.util import find_spec

from nmt import Interrupted, UserError
from nmt.cli import imports_whole

PROGRAMS = ("compare", "lab", "results", "measure", "tune", "queue")  # each a module of nmt_study/cli/ with main(argv)


STUDY_EXTRA = ("optuna", "scipy", "statsmodels")  # what `pip install 'nmt-classics[study]'` adds to the toolkit


def main(argv: list[str] | None = None) -> None:
    missing = [name for name in STUDY_EXTRA if find_spec(name) is None]
    if missing:
        sys.exit(
            f"error: the study needs {', '.join(missing)}: pip install 'nmt-classics[study]' (a checkout: make install)"
        )
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return
    if argv[0] not in PROGRAMS:
        sys.exit(f"error: python -m nmt_study {argv[0]}: no such program; use one of {', '.join(PROGRAMS)}")
    try:
        with imports_whole():  # a Ctrl-C inside numpy's or torch's import would leave them half made
            program = import_module(f"nmt_study.cli.{argv[0]}")
        program.main(argv[1:])
    except UserError as error:  # a refusal names the option or file and what to do: no traceback
        sys.exit(f"error: {error}")
    except Interrupted as stop:  # Ctrl-C or SIGTERM after what ran saved itself: a shell's status for the signal
        print(f"stopped: {stop}", file=sys.stderr, flush=True)
        sys.exit(128 + stop.signal_number)
    except KeyboardInterrupt:  # one no program handles (as it starts, or in a report): files are written whole or not
        print("stopped by Ctrl-C", file=sys.stderr, flush=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
