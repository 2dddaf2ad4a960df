"""A training run as it lies on disk: its folder (folder.py: RunFolder, its lock, its files, its validations'
record), its checkpoints written atomically and loaded with weights_only (checkpoint.py), continuing a run
(resume.py), averaging its validations' weights (averaging.py), and where and how each invocation ran
(provenance.py). The names of a run's files are nmt.paths'."""
