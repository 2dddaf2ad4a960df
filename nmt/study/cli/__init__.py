"""The study's programs, each a `main(argv)` behind one entry: `python -m nmt.study PROGRAM` (nmt/study/__main__.py)."""
