"""hydra/launcher=packed: the jobs of a `train.py -m` sweep trained together in one process (nmt.launch.pack)."""
