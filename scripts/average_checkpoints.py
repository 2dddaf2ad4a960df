"""Average the weights of a run's last checkpoints into one that decodes better.

python scripts/average_checkpoints.py RUN_DIR [--last 5] [--output RUN_DIR/averaged.pt]
python scripts/average_checkpoints.py a.pt b.pt c.pt --output averaged.pt

A run directory holds `step<N>.pt` for its last `trainer.keep_checkpoints` validations. Evaluate the result with
`python evaluate.py checkpoint=RUN_DIR/averaged.pt beam=5`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nmt import UserError
from nmt.paths import output_file
from nmt.runs import averaging, checkpoint


def choose(inputs: list[Path], last: int) -> list[Path]:
    if len(inputs) == 1 and inputs[0].is_dir():
        found = sorted(inputs[0].glob("step*.pt"))
        if not found:
            raise UserError(f"{inputs[0]}: no step<N>.pt checkpoints (trainer.keep_checkpoints was 0?)")
        return found[-last:]
    return inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", type=Path, help="a run directory, or checkpoint files")
    parser.add_argument("--last", type=int, default=5, help="how many of a run directory's newest checkpoints")
    parser.add_argument("--output", type=Path, help="default: averaged.pt in the run directory (or beside the first)")
    parser.add_argument(
        "--overwrite", action="store_true", help="--output may replace an existing file (never a run's own checkpoints)"
    )
    args = parser.parse_args()
    try:
        if args.last < 1:
            raise UserError(f"--last {args.last}: average at least one checkpoint")
        paths = choose(args.inputs, args.last)
        folder = args.inputs[0] if args.inputs[0].is_dir() else args.inputs[0].parent
        output = output_file(
            args.output or folder / "averaged.pt",
            "--output",
            tuple(paths),
            args.overwrite or (None if args.output is None else False),
            checkpoint=True,  # an averaged.pt of an earlier call is its own; a run's checkpoints stay refused
        )
        payload = averaging.average(paths)
        checkpoint.save(payload, output)
    except UserError as error:
        sys.exit(f"error: {error}")
    print(f"averaged {len(paths)} checkpoints (steps {payload['progress']['averaged_steps']}) into {output}")


if __name__ == "__main__":
    main()
