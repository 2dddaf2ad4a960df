"""The study's measurements, one module each, run as `python -m nmt.study measure NAME` (nmt/study/cli/measure.py)."""
