"""The study's programs, each a `main(argv)` behind one entry: `python -m nmt_study PROGRAM` (nmt_study/__main__.py)."""
