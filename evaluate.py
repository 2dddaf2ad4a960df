"""Score a checkpoint: python evaluate.py checkpoint=outputs/.../best.pt split=test (or nmt-evaluate ...)

The command itself is nmt/cli/evaluate.py; this file lets a checkout run it as `python evaluate.py`."""

from nmt.cli.evaluate import main

if __name__ == "__main__":
    main()
