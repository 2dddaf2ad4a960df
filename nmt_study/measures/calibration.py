"""How often a test between two variants that differ in nothing calls them different: the false-positive rate of
`nmt_study.significance.contrast` in simulated studies, beside the two-stage bootstrap it replaced (main at 7be1709,
with --old FILE: that commit's nmt_study/significance.py, e.g. from `git show 7be1709:nmt_study/significance.py`).

python -m nmt_study measure calibration [--studies 2000] [--seeds 3] [--old /tmp/old_significance.py]

Each study: one test set of 150 sentences with a shared difficulty, each variant's seeds an offset each plus noise
per sentence, the score a mean over sentences, 200 shared resamples; the regimes set which noise dominates.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from nmt_study.measures import options
from nmt_study.significance import Resampler, Runs, contrast

REGIMES = {
    "seeds dominate": (1.0, 0.5, 0.0),
    "sentences dominate": (0.05, 2.0, 0.0),
    "a test-set effect": (0.05, 0.5, 1.0),
    "mixed": (0.3, 1.0, 0.5),
}  # seed sd, noise sd, effect sd


def study(rng, counts, seeds: int, seed_sd: float, noise_sd: float, effect_sd: float, runs_class=Runs):
    sentences = rng.normal(0, 1, counts.shape[1])
    n = len(sentences)
    made = []
    for name in ("a", "b"):
        scores = (sentences + rng.normal(0, effect_sd, n))[None, :] + rng.normal(0, seed_sd, (seeds, 1))
        scores = scores + rng.normal(0, noise_sd, (seeds, n))
        made.append(runs_class(name, scores.mean(1), scores @ counts.T / n, *([n] if runs_class is Runs else [])))
    return made


def main(argv: list[str] | None = None) -> None:
    parser = options(__name__, __doc__)
    parser.add_argument("--studies", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--old", type=Path, default=None, help="the old significance.py, to test beside")
    args = parser.parse_args(argv)
    old = None
    if args.old:
        spec = importlib.util.spec_from_file_location("old_significance", args.old)
        old = sys.modules["old_significance"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
    counts = Resampler(150, resamples=200, seed=3).counts
    print(f"false positives at the 0.05 level, {args.seeds} against {args.seeds} seeds, {args.studies} studies each")
    for regime, noise in REGIMES.items():
        rng = np.random.default_rng(1)
        found = sum(
            contrast([(1.0, a), (-1.0, b)]).p < 0.05
            for a, b in (study(rng, counts, args.seeds, *noise) for _ in range(args.studies))
        )
        line = f"  {regime:18} now {found / args.studies:.3f}"
        if old is not None:
            rng = np.random.default_rng(1)
            studies = (study(rng, counts, args.seeds, *noise, old.Runs) for _ in range(args.studies))
            before = sum(old.contrast([(1.0, a), (-1.0, b)], seed=k).p < 0.05 for k, (a, b) in enumerate(studies))
            line += f"   two-stage bootstrap {before / args.studies:.3f}"
        print(line, flush=True)
