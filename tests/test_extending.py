"""What docs/extending.md says must agree does: each model family and attention score has its module among those nmt
builds and loads, its schema, its config file, a family that takes it, and its reference test."""

import ast
import subprocess
import sys

from conftest import ROOT, compose_config

from nmt.models.options import ATTENTIONS, MODELS


def test_every_family_is_in_the_import_list_with_its_schema_and_config():
    from nmt.build import buildable
    from nmt.models.model import FAMILY_MODULES

    models, _ = buildable()
    configs = {path.stem for path in (ROOT / "configs" / "model").glob("*.yaml")}
    assert configs == set(MODELS), "configs/model/<name>.yaml and model_config.MODELS name other families"
    for name, schema in MODELS.items():
        target = compose_config(f"model={name}").model._target_
        assert target == schema._target_ and target in models, f"model={name}: {target} is not a buildable family"
        assert target.rsplit(".", 1)[0] in FAMILY_MODULES, (
            f"{target}: its module is not in nmt.models.model.FAMILY_MODULES"
        )
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, nmt.launch.experiment; print(sorted(m for m in sys.modules if m.startswith('nmt')))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert all(f"'{module}'" in loaded for module in FAMILY_MODULES), "train.py must load every family as it starts"


def test_every_score_has_its_schema_config_a_family_that_takes_it_and_its_reference():
    references = (ROOT / "tests" / "test_attention.py").read_text(encoding="utf-8")
    modules = next(
        node.value
        for node in ast.parse(references).body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "MODULES" for t in node.targets)
    )
    MODULES = {key.value for key in modules.keys}  # the scores with a reference written from their equations

    from nmt.build import buildable, option_name

    models, attentions = buildable()
    configs = {path.stem for path in (ROOT / "configs" / "model" / "attention").glob("*.yaml")}
    assert configs == set(ATTENTIONS), "configs/model/attention/<name>.yaml and model_config.ATTENTIONS differ"
    taken = {score for cls in models.values() for score in getattr(cls, "SCORES", ())}
    for name, schema in ATTENTIONS.items():
        assert schema._target_ in attentions and option_name(schema._target_) == name, name
        assert name in taken, f"model/attention={name}: no family's SCORES takes it"
        assert name == "none" or name in MODULES, f"{name}: no reference in tests/test_attention.py"


def test_every_score_says_what_it_costs():
    """A budget counts FLOPs (trainer.max_flops), so every attention says what its score costs (`flops`); a score
    written without it would fail at its first update (docs/extending.md)."""
    from nmt.build import buildable
    from nmt.models.attention import Attention

    _, attentions = buildable()
    lacking = [name for name, cls in attentions.items() if issubclass(cls, Attention) and cls.flops is Attention.flops]
    assert not lacking, f"no flops(batch, queries, positions) of their own: {lacking}"


def test_every_figure_has_its_direction_and_the_best_checkpoint_follows_it(sample_splits):
    """The metrics table (nmt/metrics.py) holds every figure a validation records, evaluate reports and
    trainer.select offers, each with its direction; the best-checkpoint rule takes the direction from it (a higher
    BLEU, a lower loss or AER), not from the figure's name."""
    from nmt.config import TRAINER_CHOICES as CHOICES
    from nmt.decoding.evaluate import scores_of
    from nmt.metrics import METRICS, SELECTABLE, VALIDATED
    from nmt.training.state import Progress
    from nmt.training.validation import RECORDED, improves

    assert all(isinstance(metric.higher_is_better, bool) for metric in METRICS.values())
    pairs = sample_splits.valid[:5]
    reported = scores_of([s for s, _ in pairs], [t for _, t in pairs], [t for _, t in pairs])
    assert {k for k in reported if k != "bleu_by_length"} <= set(METRICS)
    assert set(RECORDED) - {"seconds"} == set(VALIDATED) and set(CHOICES["select"]) == set(SELECTABLE) <= set(METRICS)
    for name in SELECTABLE:
        progress = Progress()
        progress.best_score = 10.0
        up = improves(name, {name: 11.0}, progress)
        assert up == METRICS[name].higher_is_better and improves(name, {name: 9.0}, progress) != up


def test_every_family_has_its_sizes_its_variant_and_its_row_in_the_studys_list():
    """docs/extending.md's rows for a new family beyond its module and schema: the tiny and lab sizes (a missing one
    fails only when a test or the lab composes it), a variant of its own name, and the study's list of families."""
    from nmt_study.variants import FAMILIES

    for name in MODELS:
        for size in ("tiny", "lab"):
            assert (ROOT / "configs" / "family_size" / f"{size}_{name}.yaml").is_file(), f"{size}_{name}.yaml"
        assert (ROOT / "configs" / "variant" / f"{name}.yaml").is_file(), f"configs/variant/{name}.yaml"
    assert set(FAMILIES) == set(MODELS)
