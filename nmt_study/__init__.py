"""The study: finished runs -> tables, statistics, verdicts and the generated results.

sweep (train variants x seeds through Hydra's launchers), comparison (one report over runs), significance (paired tests
per seed, intervals over seeds and sentences), claims (the papers' claims and their verdicts), results (`make results`:
the JSON in results/ and the tables rendered from it into README.md and docs/).
"""
