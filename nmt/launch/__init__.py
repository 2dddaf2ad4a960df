"""Runs started: one run from its config to its report (experiment.py), several runs packed into one process
(pack.py), and Hydra sweeps' folders, stops and failures (multirun.py)."""
