"""Train a model: python train.py model=bahdanau data=multi30k trainer.max_minutes=30 ... (or nmt-train ...)

The command itself is nmt/cli/train.py; this file lets a checkout run it as `python train.py`."""

from nmt.cli.train import main

if __name__ == "__main__":
    main()
