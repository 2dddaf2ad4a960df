"""The reports' arithmetic and the scripts that train and report (loaded as modules), on tiny runs."""

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import commands
import numpy as np
import pytest
import torch
from commands import run as run_command
from conftest import ROOT, compose_config, fork_sweeps
from omegaconf import OmegaConf

from nmt import UserError
from nmt.device import autocast, resolve
from nmt.models.flops import counted
from nmt.runs import checkpoint
from nmt_study import comparison as compare
from nmt_study import published, tables
from nmt_study import records as run_records
from nmt_study import report as reports
from nmt_study.claims import (
    EQUIVALENT,
    IMPROVING,
    MIXED,
    OPPONENT,
    UNDERPOWERED,
    UNTESTABLE,
    check_claims,
    judged,
    last_third_gain,
    still_improving,
)
from nmt_study.significance import (
    CONTRADICTED,
    INCONCLUSIVE,
    NEEDS_SEEDS,
    NOT_MEASURED,
    SUPPORTED,
    Evidence,
    Interval,
)
from nmt_study.variants import FAMILIES, Variant

# The keys (nmt_study/variants.py) of the variants the claims' tests name: the claims pair runs by key, never by name
KEYS = {
    v.name: v
    for v in [
        Variant("sutskever"),
        Variant("bahdanau", "additive"),
        Variant("bahdanau", "none"),
        Variant("transformer"),
        Variant("transformer", window=4),
        Variant("luong", "general", alignment="global", feeding=True, bidirectional=False),  # the paper's model
        Variant("luong", "general", alignment="global", feeding=True, bidirectional=True),
        *(
            Variant("luong", score, alignment=alignment, feeding=False, bidirectional=True)
            for score in ("dot", "general", "concat", "location")
            for alignment in ("global", "local_m", "local_p")
        ),
    ]
}


def name_of(model: dict) -> str:
    return Variant.of(model).name


STUDY_PROGRAMS = {"compare": "cli.compare", "lab": "cli.lab", "results": "cli.results", "benchmark": "measures.speed"}
MEASURES = ("joeynmt", "attention_kernels", "calibration", "decode_memory", "alignment_offset", "validation_cost")


def load_script(name: str):
    """scripts/<name>.py, the study's program of that name (`python -m nmt_study compare|lab|results`) or one of its
    measurements (`python -m nmt_study measure NAME`)."""
    if name in STUDY_PROGRAMS:
        return importlib.import_module(f"nmt_study.{STUDY_PROGRAMS[name]}")
    if name in MEASURES:
        return importlib.import_module(f"nmt_study.measures.{name}")
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runs_that_differ_only_in_seed_get_mean_and_spread():
    runs = [
        {"name": "bahdanau (additive)", "seed": 2, "run": "b2", "test_bleu": 33.0, "test_bleu_beam": 34.0},
        {"name": "bahdanau (additive)", "seed": 1, "run": "b1", "test_bleu": 31.0, "test_bleu_beam": 32.0},
        {"name": "sutskever", "seed": 1, "run": "s1", "test_bleu": 16.0, "test_bleu_beam": None},
    ]
    groups = compare.group(runs)
    assert [r["seed"] for r in groups["bahdanau (additive)"]] == [1, 2]
    assert compare.spread([compare.headline(r) for r in groups["bahdanau (additive)"]]) == "33.00 ± 1.41"
    assert compare.spread([compare.headline(r) for r in groups["sutskever"]]) == "16.00"  # greedy when no beam
    with pytest.raises(UserError, match="both sutskever with seed 1"):
        compare.group([*runs, {**runs[2], "run": "s1 again"}])


def test_two_runs_of_one_variant_and_seed_are_refused_before_anything_is_decoded(tmp_path):
    from nmt_study.sweep import settings

    paper, before = tmp_path / "luong_paper" / "seed1", tmp_path / "before" / "luong" / "seed1"
    dropouts = {paper: 0.2, before: 0.2}  # the same config, trained twice
    for run, dropout in dropouts.items():
        config = settings(
            [
                "model=luong",
                "model.bidirectional=false",
                "model.input_feeding=true",
                "seed=1",
                f"model.dropout={dropout}",
            ]
        )
        (run / ".hydra").mkdir(parents=True)
        OmegaConf.save(config, run / ".hydra" / "config.yaml")  # no checkpoint: describing would fail otherwise
    with pytest.raises(UserError, match=r"both luong \(general, global\) with seed 1"):
        run_records.describe_runs([paper, before], beam=1)


def test_runs_are_seeds_of_one_variant_only_when_their_configs_differ_in_the_seed_alone():
    from nmt_study.sweep import settings

    def run(seed, *overrides):
        config = settings(["model=luong", f"seed={seed}", *overrides])
        return {"name": "luong (general, global)", "seed": seed, "run": f"r{seed}{overrides}", "config": config}

    runs = [
        run(1),
        run(2),
        run(1, "model.dropout=0.3"),
        run(4, "data.dir=/elsewhere", "trainer.progress=false"),
        run(3, "trainer.max_flops=1e14"),
    ]
    groups = compare.group(runs)
    assert sorted(groups) == [
        "luong (general, global) [model.dropout=0.2, trainer.max_flops=1e+14]",
        "luong (general, global) [model.dropout=0.2, trainer.max_flops=5e+14]",
        "luong (general, global) [model.dropout=0.3, trainer.max_flops=5e+14]",
    ]
    defaults = "luong (general, global) [model.dropout=0.2, trainer.max_flops=5e+14]"
    assert [r["seed"] for r in groups[defaults]] == [1, 2, 4]
    with pytest.raises(UserError, match="both luong .* with seed 2"):
        compare.group([*runs, run(2, "trainer.progress=false")])  # the same run again
    assert compare.group([run(1), run(2)]).keys() == {"luong (general, global)"}  # nothing tells them apart


def test_variant_names_tell_the_score_alignment_normaliser_hard_mode_and_window():
    def bahdanau(**attention):
        return {
            "_target_": "nmt.models.rnn.BahdanauSeq2Seq",
            "attention": {"_target_": "nmt.models.attention.AdditiveAttention", **attention},
        }

    assert name_of(bahdanau()) == "bahdanau (additive)"  # a checkpoint from before the options
    assert name_of(bahdanau(normalizer="softmax", hard="none")) == "bahdanau (additive)"
    assert name_of(bahdanau(normalizer="sparsemax", hard="none")) == "bahdanau (additive, sparsemax)"
    assert name_of(bahdanau(hard="reinforce")) == "bahdanau (additive, hard reinforce)"
    luong = {
        "_target_": "nmt.models.rnn.LuongSeq2Seq",
        "alignment": "local_p",
        "window": 10,
        "input_feeding": False,
        "attention": {"_target_": "nmt.models.attention.GeneralAttention", "normalizer": "entmax15"},
    }
    assert name_of(luong) == "luong (general, local_p, no feeding, entmax15)"  # its window is local's
    both_ways = {
        **luong,
        "alignment": "global",
        "input_feeding": True,
        "bidirectional": True,
        "attention": {"_target_": "nmt.models.attention.GeneralAttention"},
    }
    assert name_of(both_ways) == "luong (general, global, bidirectional)"
    transformer = {"_target_": "nmt.models.transformer.Transformer", "window": 0}
    assert name_of(transformer) == "transformer"
    assert name_of({**transformer, "window": 4}) == "transformer (window 4)"


def test_the_curves_come_from_the_runs_validations_file_never_from_tensorboard(tmp_path):
    """validations.jsonl: minutes trained (the time a run was stopped is not in them), the last line of an update a
    resumed run validated twice, a line cut short by a crash skipped; event files are not read (a run with only
    those has no curves)."""
    from torch.utils.tensorboard import SummaryWriter

    entry = {"train_minutes": 1.5, "step": 30, "bleu": 5.0, "petaflops": 0.1, "epochs": 0.5}
    lines = [entry, {**entry, "bleu": 5.5}, {**entry, "train_minutes": 3.5, "step": 60, "bleu": 9.0, "epochs": 1.0}]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (tmp_path / "validations.jsonl").write_text(text + '{"step": 90, "bleu"')
    assert run_records.valid_curve(tmp_path) == [(1.5, 30, 5.5), (3.5, 60, 9.0)]
    assert run_records.compute_curve(tmp_path) == [(0.1, 0.5, 5.5), (0.1, 1.0, 9.0)]
    older = tmp_path / "older"
    with SummaryWriter(str(older)) as writer:
        writer.add_scalar("valid/bleu", 7.0, 30)
    assert run_records.valid_curve(older) == [] and run_records.compute_curve(older) == []


def test_equal_updates_reads_every_curve_at_the_updates_all_of_them_reached():
    seed_a = {"curve": [(1.0, 30, 10.0), (2.0, 60, 20.0), (3.0, 90, 24.0)]}
    seed_b = {"curve": [(1.2, 30, 12.0), (2.2, 60, 22.0)]}  # stopped earlier
    mean = compare.mean_curve([seed_a, seed_b])
    assert [step for _, step, _ in mean] == [30, 60]
    assert [(m, b) for m, _, b in mean] == [pytest.approx((1.1, 11.0)), pytest.approx((2.1, 21.0))]
    curves = {"slow": [(4.0, 30, 5.0), (8.0, 60, 9.0)], "fast": [(1.0, 30, 7.0), (2.0, 60, 15.0), (3.0, 90, 19.0)]}
    steps, table = compare.equal_updates(curves)
    assert steps == [30, 60] and table == {"slow": [5.0, 9.0], "fast": [7.0, 15.0]}
    assert compare.equal_updates({"a": [(1.0, 30, 1.0)], "b": [(1.0, 40, 1.0)]}) == ([], {})


def test_the_curves_legend_sits_beside_the_axes_and_every_line_has_its_own_colour(tmp_path):
    lines = {f"luong (general, variant {i}, a long name)": ([0, 1, 2], [i, i + 1, i + 2]) for i in range(16)}
    figure = reports.line_figure(lines, "updates", "valid BLEU", "sixteen variants", tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0
    renderer = figure.canvas.get_renderer()
    axes = figure.axes[0]
    legend, plot = axes.get_legend().get_window_extent(renderer), axes.get_window_extent(renderer)
    assert legend.x0 >= plot.x1  # no curve hidden behind the legend
    assert legend.x1 <= figure.bbox.x1 + 1  # and the legend is not cut off
    assert len({line.get_color() for line in axes.get_lines()}) == 16


def test_the_heatmap_grids_title_sits_above_every_panels_title():
    import numpy as np

    from nmt.decoding.plot import panels_figure

    words = "ein Hund läuft über das Gras".split()
    titles = [f"luong (general, variant {i}, no feeding, bidirectional)" for i in range(15)]
    figure = panels_figure([np.eye(len(words))] * 15, titles, words, words, "attention of each model")
    renderer = figure.canvas.get_renderer()
    figure.draw(renderer)
    top = figure._suptitle.get_window_extent(renderer)
    panel_titles = [axes.title.get_window_extent(renderer) for axes in figure.axes if axes.get_title()]
    assert len(panel_titles) == 15
    assert all(box.y1 <= top.y0 for box in panel_titles)


def test_the_attention_figure_shows_our_own_sentence_for_multi30k_and_a_test_pair_elsewhere():
    pairs = [("kurz .", "short ."), (" ".join(["wort"] * 12), " ".join(["word"] * 12))]
    multi30k = {"corpus": "multi30k", "src_lang": "de", "tgt_lang": "fr"}
    assert run_records.shown_pair(multi30k, pairs) == (run_records.OWN_SENTENCE["de"], run_records.OWN_SENTENCE["fr"])
    assert run_records.shown_pair({"corpus": "sample", "src_lang": "de", "tgt_lang": "en"}, pairs) == pairs[1]
    assert run_records.shown_pair({"corpus": "files"}, pairs[:1]) == pairs[0]  # none of 10-14 words: the first


def test_the_claims_compare_like_with_like_and_follow_from_the_intervals():
    """Each claim's verdict is its primary comparison's (like for like, fixed in claims.py); secondary comparisons
    are shown, Holm-adjusted, and make a claim mixed only when significant ones point both ways; a variant still
    learning at the end of its budget withholds the verdict; the length claim needs sentences over 30 words."""
    from helpers import REFERENCES, system

    local_m, local_p = (
        "luong (general, local_m, no feeding, bidirectional)",
        "luong (general, local_p, no feeding, bidirectional)",
    )
    glob, location = (
        "luong (general, global, no feeding, bidirectional)",
        "luong (location, global, no feeding, bidirectional)",
    )
    runs = {
        "sutskever": system(2),
        "bahdanau (additive)": system(8),
        "bahdanau (fixed context)": system(2),
        "luong (general, global)": system(5),  # the paper's model: no variant without feeding to pair it with
        "luong (general, global, bidirectional)": system(5),
        glob: {s: h for s, h in system(5, (4, 5, 6)).items()},
        local_p: system(3),
        "transformer": system(8, (7, 8, 9)),
        "transformer (window 4)": system(3),  # a Transformer too: not among the recurrent models it is tested against
    }
    runs = {name: dict(zip((1, 2, 3), seeds.values())) for name, seeds in runs.items()}
    valid = {name: 20.0 for name in runs} | {"luong (general, global)": 25.0}  # Luong's family by valid BLEU
    right, wrong = np.array([[2, 3, 3, 2]] * 40), np.array([[1, 1, 3, 2]] * 40)  # AER 0 and 0.6
    alignments = {
        local_p: {s: right for s in (1, 2, 3)},
        local_m: {s: right for s in (1, 2, 3)},
        glob: {s: wrong for s in (1, 2, 3)},
        location: {s: wrong for s in (1, 2, 3)},
    }
    evidence = Evidence(runs, REFERENCES, [8] * len(REFERENCES), alignments, resamples=1000)
    claims = {c.claim: c for c in check_claims(evidence, KEYS, valid)}
    assert {claim: c.verdict for claim, c in claims.items()} == {
        "Attention beats the fixed-vector encoder-decoder": SUPPORTED,
        "The gap grows with sentence length": UNTESTABLE,  # every sentence has 8 words
        "Input feeding helps": INCONCLUSIVE,  # the same quality with and without
        "Local-p attention with the general score is the best Luong variant": CONTRADICTED,  # below global
        "Local attention aligns better than global (lower AER)": SUPPORTED,  # like for like: local-p against global
        "The Transformer beats the recurrent models": SUPPORTED,  # above the best recurrent, level with Bahdanau
    }
    attention = claims["Attention beats the fixed-vector encoder-decoder"]
    assert attention.comparisons[0]["label"] == "bahdanau (additive) minus bahdanau (fixed context)"
    assert attention.comparisons[0]["role"] == "primary" and attention.detectable > 0 and attention.unit == "BLEU"
    assert all(
        c["label"].startswith("luong") and c["label"].endswith("minus sutskever") for c in attention.comparisons[1:]
    )  # Luong's own baseline; the Transformer has none
    feeding = claims["Input feeding helps"]  # the one pair that differs only in feeding
    assert feeding.evidence.startswith("primary: luong (general, global, bidirectional) minus without feeding: +0.00")
    assert len(feeding.comparisons) == 1 and feeding.comparisons[0]["verdict"] == INCONCLUSIVE
    local = claims["Local-p attention with the general score is the best Luong variant"].comparisons
    assert [c["label"] for c in local] == [f"{local_p} minus {glob}"]  # its own encoder and feeding; no local-m
    aligns = claims["Local attention aligns better than global (lower AER)"]
    assert aligns.comparisons[0]["label"] == f"{local_p} minus {glob}" and aligns.unit == "AER"
    assert {c["label"] for c in aligns.comparisons[1:]} == {
        f"{local_p} minus {location} (Table 6's ordering)",
        f"{local_m} minus {glob}",
        f"{local_m} minus {location} (Table 6's ordering)",
    }
    transformer = claims["The Transformer beats the recurrent models"].comparisons
    assert [c["label"].split(" minus ")[1] for c in transformer] == [
        "luong (general, global, bidirectional)",  # the design's opponent, fixed in advance, not the best on valid
        "sutskever",
        "bahdanau (additive)",
    ]
    assert [c["verdict"] for c in transformer] == [SUPPORTED, SUPPORTED, INCONCLUSIVE]
    assert all(c["p_holm"] >= c["p"] for c in transformer[1:]) and transformer[0]["p_holm"] is None
    mixed = dict(valid, **{"bahdanau (additive)": 30.0})  # the best recurrent is level: a secondary is above it
    worse = Evidence({**runs, "transformer": runs["luong (general, global)"]}, REFERENCES, resamples=1000)
    claims = {c.claim: c for c in check_claims(worse, KEYS, mixed)}
    assert claims["The Transformer beats the recurrent models"].verdict in (MIXED, INCONCLUSIVE)
    improving = check_claims(evidence, KEYS, valid, improving={"bahdanau (fixed context)": 100.0})[0]
    assert improving.verdict == IMPROVING and "bahdanau (fixed context), behind by" in improving.evidence
    ahead = check_claims(evidence, KEYS, valid, improving={"bahdanau (additive)": 100.0})[0]
    assert ahead.verdict == SUPPORTED and "already ahead: the verdict stands" in ahead.evidence
    one_seed = Evidence({n: {1: h[1]} for n, h in runs.items()}, REFERENCES, resamples=200)
    assert check_claims(one_seed, KEYS, valid)[0].verdict == NEEDS_SEEDS  # figures, no verdict
    assert all(
        c.verdict in (NOT_MEASURED, UNTESTABLE)
        for c in check_claims(Evidence({"transformer": runs["transformer"]}, REFERENCES, resamples=100), KEYS, valid)
    )
    lab = {
        "claims": [
            {
                "claim": "The gap grows with sentence length",
                "source": "Bahdanau",
                "verdict": SUPPORTED,
                "evidence": "long",
                "comparisons": [],
            }
        ]
    }
    from_lab = {c.claim: c for c in check_claims(evidence, KEYS, valid, lab)}["The gap grows with sentence length"]
    assert from_lab.verdict == SUPPORTED and from_lab.evidence == "the lab: long"


def test_a_claim_is_mixed_when_significant_comparisons_point_both_ways():
    up = Interval(2.0, 1.0, 3.0, 0.001, 3, 1000)
    down = Interval(-2.0, -3.0, -1.0, 0.001, 3, 1000)
    level = Interval(0.1, -1.0, 1.2, 0.8, 3, 1000)
    assert judged("c", "p", ("a", up, 1), [("b", down, 1)]).verdict == MIXED
    assert judged("c", "p", ("a", up, 1), [("b", level, 1)]).verdict == SUPPORTED  # the primary decides
    assert judged("c", "p", ("a", level, 1), [("b", up, 1)]).verdict == INCONCLUSIVE  # a secondary cannot
    assert judged("c", "p", ("a", down, 1)).verdict == CONTRADICTED


def test_the_transformers_claim_reads_no_difference_larger_than_the_margin_where_its_interval_lies_inside():
    """The design's primary test (nmt_study/design.py): the Transformer against luong_feeding, fixed in advance; an
    inconclusive difference whose 95% interval lies inside ±EQUIVALENCE reads "no difference larger than 1 BLEU"; one
    that reaches past the margin stays inconclusive, a significant one keeps its verdict; no margin, no equivalence."""
    assert EQUIVALENT == "no difference larger than 1 BLEU"
    assert Variant.of(OmegaConf.to_container(compose_config("variant=luong_feeding").model)) == OPPONENT
    inside, wide = Interval(0.2, -0.6, 0.9, 0.5, 5, 1000), Interval(0.2, -1.1, 1.4, 0.6, 5, 1000)
    small_but_real = Interval(0.5, 0.1, 0.9, 0.02, 5, 1000)
    assert judged("c", "p", ("a", inside, 1), equivalence=1.0).verdict == EQUIVALENT
    assert judged("c", "p", ("a", wide, 1), equivalence=1.0).verdict == INCONCLUSIVE
    assert judged("c", "p", ("a", small_but_real, 1), equivalence=1.0).verdict == SUPPORTED
    assert judged("c", "p", ("a", inside, 1)).verdict == INCONCLUSIVE  # no margin fixed: no equivalence
    learning = judged("c", "p", ("a", inside, 1), involved=("a", "b"), improving={"b": 1.0}, equivalence=1.0)
    assert learning.verdict == IMPROVING  # a side still learning could move it past the margin


def test_a_verdict_is_withheld_only_where_more_training_could_change_it():
    """Direction-aware "still improving": a significant verdict stands where the side still learning leads, or where
    the side behind gains too little to close the gap in EXTRA_THIRDS more thirds; it is withheld where it could
    close it, and an inconclusive one wherever a side still learns. An inconclusive test unable to find the paper's
    gap says so."""
    up = Interval(2.0, 1.0, 3.0, 0.001, 3, 1000, se=0.5, df=4)  # a minus b: a leads by 2 BLEU
    level = Interval(0.1, -1.0, 1.2, 0.8, 3, 1000, se=0.5, df=4)
    pair = ("a", "b")
    assert judged("c", "p", ("x", up, 1), improving={"a": 3.0}, involved=pair).verdict == SUPPORTED  # the leader
    held = judged("c", "p", ("x", up, 1), improving={"b": 0.7}, involved=pair)  # 3 x 0.7 = 2.1 >= 2: could close
    assert held.verdict == IMPROVING and "b, behind by 2.00 BLEU" in held.evidence
    stands = judged("c", "p", ("x", up, 1), improving={"b": 0.62, "a": 0.1}, involved=pair)  # 3 x 0.52 < 2
    assert stands.verdict == SUPPORTED and "already ahead" not in stands.evidence
    assert judged("c", "p", ("x", level, 1), improving={"a": 0.7}, involved=pair).verdict == IMPROVING
    assert judged("c", "p", ("x", level, 1), improving={"a": 0.5}, involved=pair).verdict == INCONCLUSIVE
    aer = Interval(-0.05, -0.2, 0.1, 0.4, 8, 1000, se=0.07, df=14)  # detects about 0.2 AER, the paper's gap 0.03
    weak = judged("c", "p", ("x", aer, -1), unit="AER", involved=pair, paper_gap=(0.03, "another pair"))
    assert weak.verdict == UNDERPOWERED and "the paper's gap was 0.03 AER (another pair)" in weak.evidence
    assert judged("c", "p", ("x", aer, -1), unit="AER", involved=pair, paper_gap=(0.5, "")).verdict == INCONCLUSIVE


def test_still_improving_reads_the_last_third_of_each_run():
    flat = [[0, step, 30.0 + 0.1 * (step // 100 % 2)] for step in range(100, 1300, 100)]
    rising = [[0, step, 20.0 + step / 200] for step in range(100, 1300, 100)]  # +2 BLEU per third of 1,200 updates
    assert last_third_gain(rising) == pytest.approx(2.0) and abs(last_third_gain(flat)) < 0.2
    trainer = {"max_flops": 1e14, "patience": 5}

    def run(curve: list, best: int = 1200, petaflops: float = 0.1) -> dict:  # a record: 1,200 updates
        return {
            "curve": curve,
            "best_step": best,
            "updates": 1200,
            "petaflops": petaflops,
            "config": {"trainer": trainer},
        }

    assert still_improving([run(rising)] * 2) and not still_improving([run(flat)] * 2)
    assert not still_improving([run(rising)] + [run(flat)] * 3)  # on average, not one seed
    stalled = run(rising, best=700, petaflops=0.08)  # patience stopped it, 5 validations past its best: converged
    assert not still_improving([stalled] * 2) and still_improving([run(rising), run(rising, petaflops=0.08)])


def test_the_gap_by_length_compares_what_each_model_keeps_on_long_sentences():
    """Figure 2's claim as a ratio: the share of its short-sentence BLEU each model keeps in each longer bucket,
    averaged over every bucket (the middle ones too), Bahdanau's model against its fixed-context twin."""
    from helpers import degrade

    short = [f"the {a} {n} {v} ." for a, n, v in [("small", "dog", "runs"), ("old", "man", "sleeps")] * 30]
    middle = [" ".join(f"m{i}{k}" for k in range(15)) for i in range(60)]
    long = [" ".join(f"w{i}{k}" for k in range(40)) for i in range(60)]
    references, lengths = short + middle + long, [5] * 60 + [15] * 60 + [40] * 60
    wrong_on_long = {s: short + middle + [degrade(r, 2, s) for r in long] for s in (1, 2, 3)}
    right = {s: [degrade(r, 9, s) for r in references] for s in (1, 2, 3)}
    evidence = Evidence(
        {"bahdanau (fixed context)": wrong_on_long, "bahdanau (additive)": right}, references, lengths, resamples=500
    )
    claim = check_claims(evidence, KEYS, {"bahdanau (fixed context)": 1.0, "bahdanau (additive)": 2.0})[1]
    kept = "BLEU kept in each longer bucket, 11-20 words (60 sentences), 31-40 words (60 sentences),"
    assert claim.verdict == SUPPORTED and kept in claim.evidence
    by_bucket = [evidence.retention("bahdanau (fixed context)", (1, 10), b).observed for b in ((11, 20), (31, 40))]
    mean = evidence.mean_retention("bahdanau (fixed context)", (1, 10), [(11, 20), (31, 40)]).observed
    np.testing.assert_allclose(mean, np.mean(by_bucket, axis=0))  # every bucket counts, the middle one too
    few = Evidence(
        {n: {s: h[:140] for s, h in runs.items()} for n, runs in evidence.hypotheses.items()},
        references[:140],
        lengths[:140],
        resamples=200,
    )  # 20 long sentences: below LONG_MIN
    claim = check_claims(few, KEYS, {"bahdanau (fixed context)": 1.0, "bahdanau (additive)": 2.0})[1]
    assert claim.verdict == UNTESTABLE and claim.evidence.startswith("20 test sentences over 30 words")


def test_the_comparison_trains_seeds_tests_significance_and_refuses_other_settings(tmp_path, monkeypatch):
    script = load_script("compare")
    small = [
        "--train",
        "--variants",
        "sutskever,luong",
        "--seeds",
        "2",
        "--flops",
        "1.2e9",
        "--validations",
        "2",
        "--beam",
        "2",
        "--samples",
        "50",
        "--trials",
        "50",
        "--output",
        str(tmp_path / "compare"),
        "--extra",
        "data=sample",
        "data.sizes.train=300",
        "data.sizes.valid=10",
        "data.sizes.test=12",
        "model.embedding_size=16",
        "model.hidden_size=24",
        "trainer.num_plots=0",
        f"data.spm_cache={tmp_path / 'spm'}",
    ]
    script.main(small)
    output = tmp_path / "compare"
    report = (output / "report.md").read_text()
    assert "| claim | paper | these runs | evidence |" in report and "| Δ sutskever | Δ best |" in report
    assert "no claim gets a verdict under 3 seeds" in report
    assert "## Equal compute\n\nEach run trains for the same compute, 1.2e+09 FLOPs" in report
    assert re.search(r"\| variant \| [0-9.e-]+ PFLOP \| [0-9.e-]+ PFLOP \|", report)  # at half and all of it
    variants = json.loads((output / "compare.json").read_text())["variants"].values()
    assert all(len(r["compute_curve"]) == 2 for v in variants for r in v["runs"])
    luong = "luong (general, global, no feeding, bidirectional)"  # the defaults
    row = next(line for line in report.splitlines() if line.startswith(f"| {luong} | 2 |"))
    record = json.loads((output / "compare.json").read_text())
    seeds = [r["test_bleu_beam"] for r in record["variants"][luong]["runs"]]
    assert [r["seed"] for r in record["variants"][luong]["runs"]] == [1234, 1235]
    assert f"| {seeds[0]:.2f}, {seeds[1]:.2f} |" in row  # each seed's figure beside the mean
    assert record["variants"][luong]["mean_bleu"] == pytest.approx(sum(seeds) / 2)
    interval = record["intervals"]["baseline"][luong]["BLEU"]
    assert interval["seeds"] == 2 and 0 < interval["p"] <= 1 and interval["low"] <= interval["high"]
    assert interval["delta"] == pytest.approx(
        record["variants"][luong]["mean_bleu"] - record["variants"]["sutskever"]["mean_bleu"]
    )
    assert "bs BLEU" in record["signatures"] and len(record["claims"]) == 6
    assert {c["verdict"] for c in record["claims"]} <= {"needs 3 seeds", "not measured", UNTESTABLE}
    assert record["best"] == max(record["variants"], key=lambda n: record["variants"][n]["mean_valid_bleu"])
    for name in (
        "bleu_by_compute.png",
        "bleu_by_epochs.png",
        "bleu_by_time.png",
        "bleu_by_updates.png",
        "bleu_by_length.png",
        "attention.png",
    ):
        assert (output / name).is_file(), name
    assert sorted(p.parent.relative_to(output / "runs").as_posix() for p in output.glob("runs/*/*/results.json")) == [
        "luong/seed1234",
        "luong/seed1235",
        "sutskever/seed1234",
        "sutskever/seed1235",
    ]  # one train.py -m, seed by seed
    # make results' export: each run's commit (recorded by train.py), the tables rendered from the JSON
    monkeypatch.setattr(published, "RESULTS", tmp_path / "results")
    load_script("results").export(output, "compare")
    exported = json.loads((tmp_path / "results" / "compare.json").read_text())
    run = exported["variants"][luong]["runs"][0]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert run["provenance"]["commits"][0].startswith(head) and run["provenance"]["machines"]
    assert exported["torch"] == torch.__version__ and run["seed"] == 1234
    table = tables.compare_table(tmp_path / "results")
    assert f"| {luong} | 2 |" in table and f"at commit {head[:7]}" in table
    load_script("results").export(output, "claims")  # as the claims' report: under 3 seeds, figures and no verdict
    from nmt_study.claims_table import claims_table

    claims = claims_table(tmp_path / "results")
    assert "These runs have 2 seeds per variant" in claims and "Some variants have 2 seeds so far" in claims
    assert exported["finished"] == {"luong": [1234, 1235], "sutskever": [1234, 1235]}
    (tmp_path / "linked").symlink_to(output)  # make results' runs folder may be a link to another checkout's
    load_script("results").export(tmp_path / "linked", "compare")
    exported = json.loads((tmp_path / "results" / "compare.json").read_text())
    assert exported["variants"][luong]["runs"][0]["run"] == str(tmp_path / "linked" / "runs" / "luong" / "seed1234")
    assert str(tmp_path / "linked") in exported["command"] and str(output) not in exported["command"]
    # a rerun keeps finished runs (every job has trainer.resume=auto: the sweeps' own test), unless today's settings
    # differ from theirs: refused, before anything trains
    with pytest.raises(UserError, match=r"luong seed 1234 \(.*\): model.dropout: 0.2 then, 0.5 now"):
        script.main([*small, "model.dropout=0.5"])


def test_a_sweep_stopped_after_its_last_run_finished_says_so_instead_of_listing_no_runs(tmp_path):
    """device_check.sh's time limit reached a GPU sweep whose 12 runs had all just finished: the message read
    '0 of 12 runs of the sweep did not finish:' and an empty list."""
    from nmt_study.sweep import failures

    runs = [(f"luong seed {seed}", [], tmp_path / f"seed{seed}") for seed in (1, 2)]
    for _, _, run_dir in runs:
        run_dir.mkdir()
        (run_dir / "results.json").write_text("{}")
    message = failures(runs, tmp_path, 143)
    assert message.startswith("the sweep stopped with exit status 143 (SIGTERM) after all 2 of its runs had finished")
    (runs[1][2] / "results.json").unlink()
    assert failures(runs, tmp_path, 1).startswith(
        f"1 of 2 runs of the sweep did not finish:\n  luong seed 2 ({runs[1][2]})"
    )


def test_a_sweep_names_only_its_own_failed_jobs_not_those_a_sweep_just_before_left(tmp_path):
    """A sweep into a folder where the last one failed a moment ago (within the file system's clock resolution):
    the failures it reports are its own jobs', each rewritten failed.txt counted once."""
    from nmt.launch.multirun import FailedJobs
    from nmt.paths import FAILED

    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}})
    for job in ("luong/seed1", "luong/seed2", "sutskever/seed1"):
        (tmp_path / job).mkdir(parents=True)
    (tmp_path / "luong" / "seed1" / FAILED).write_text("the last sweep's\n")
    (tmp_path / "luong" / "seed2" / FAILED).write_text("the last sweep's, written again\n")
    callback = FailedJobs()
    callback.on_multirun_start(config)
    try:
        from nmt.paths import write_text

        write_text(tmp_path / "sutskever" / "seed1" / FAILED, "this sweep's\n")
        write_text(tmp_path / "luong" / "seed2" / FAILED, "this sweep's too\n")
    finally:
        with pytest.raises(SystemExit) as stop:
            callback.on_multirun_end(config)
    assert str(stop.value).startswith("error: 2 jobs of this sweep failed")
    assert "this sweep's too" in str(stop.value) and "the last sweep's" not in str(stop.value)


def test_a_failing_job_of_a_sweep_lets_the_others_run_and_is_named_with_its_reason(tmp_path, capfd):
    from nmt_study.sweep import sweep

    overrides = [
        "data=sample",
        "data.sizes.train=300",
        "data.sizes.valid=10",
        "data.sizes.test=10",
        "model.embedding_size=16",
        "model.hidden_size=25",
        "trainer.max_flops=4e8",
        "trainer.validations=1",
        "trainer.num_plots=0",
        f"data.spm_cache={tmp_path / 'spm'}",
    ]
    for _ in range(2):  # Luong's bidirectional encoder needs an even size: its job fails, the others finish
        with pytest.raises(UserError) as error:
            sweep(["luong", "sutskever"], [1, 2], overrides, tmp_path / "sweep")
        message = str(error.value)
        assert message.startswith("2 of 4 runs of the sweep did not finish")
        assert f"luong seed 1 ({tmp_path / 'sweep' / 'luong' / 'seed1'}): " in message and "make it even" in message
        assert "Rerun to train only these" in message
        assert all((tmp_path / "sweep" / "sutskever" / f"seed{s}" / "results.json").is_file() for s in (1, 2))
    assert capfd.readouterr().out.count("holds this run, finished with these settings: kept") == 2  # the rerun
    rerun = run_command(
        [
            sys.executable,
            "train.py",
            "-m",
            "variant=sutskever",
            "seed=1",
            *overrides,
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            "hydra.sweep.subdir=sutskever/seed1",
        ],
        cwd=ROOT,
        text=True,
    )  # without trainer.resume=auto
    failed_dir = tmp_path / "sweep" / "sutskever" / "seed1"
    failed = (failed_dir / "failed.txt").read_text()
    assert rerun.returncode == 1 and "already holds a run" in failed  # a sweep's options, not hydra.run.dir
    assert (
        f"error: 1 job of this sweep failed (the reason stays in each folder's failed.txt):\n  {failed_dir}: "
        in rerun.stderr
        and "Traceback" not in rerun.stderr + rerun.stdout
    )
    assert "trainer.resume=auto, or give the new run its own directory (hydra.sweep.dir=... or .subdir=...)" in failed


def text(path) -> str:
    return path.read_text() if path.is_file() else ""


def group_members(group: int) -> list[int]:
    """The processes still alive in the process group `group`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(int(entry)) == group:
                    found.append(int(entry))
    return found


def ctrl_c(command: list[str], ready: Callable[[], bool], alone: int = 0, fresh: bool = False) -> tuple[int, str]:
    """Start `command` as a shell's job, press Ctrl-C once `ready()` (the jobs are in their loops), and return its
    exit status and stderr; whatever still runs after it is killed. `alone`: send this signal to the command's own
    process instead (what kill, timeout and supervisors do). `fresh`: a process of its own, not forked (a joblib
    sweep's train.py -m: loky's workers, started from a forked process, waited minutes to start)."""
    if fresh:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    else:
        process = commands.start(command, cwd=ROOT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not ready():
            assert time.monotonic() < deadline and process.poll() is None, process.communicate()
            time.sleep(0.2)
        time.sleep(0.5)
        if alone:
            process.send_signal(alone)
        else:
            os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
        if alone:  # nothing of the sweep outlives it (idle loky workers leave when they see their parent gone)
            deadline = time.monotonic() + 30
            while group_members(process.pid) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not group_members(process.pid), "processes of the sweep still run"
    finally:  # nothing left training if the sweep did not stop
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    return process.returncode, stderr


def test_ctrl_c_stops_a_joblib_sweep_and_every_running_job_saves_its_last_update(tmp_path):
    """Ctrl-C reaches the sweep's process and its workers at once: each running job saves its run at the update it
    was at (none killed inside a checkpoint's write by a sibling's exit), no job starts after, and the sweep says so.
    A SIGTERM to the sweep's process alone, passed on to its workers: the next test."""
    overrides = [
        "data=sample",
        "data.sizes.train=300",
        "data.sizes.valid=10",
        "data.sizes.test=10",
        "model.embedding_size=16",
        "model.hidden_size=24",
        "trainer.max_flops=0",
        "trainer.max_steps=100000",
        "trainer.max_minutes=0",
        "trainer.validations=0",
        "trainer.valid_every=0",
        "trainer.patience=0",
        "trainer.progress=false",
        f"data.spm_cache={tmp_path / 'spm'}",
    ]
    sweep = tmp_path / "sweep"
    script = (
        "import sys\nfrom nmt import Interrupted\nfrom nmt_study.sweep import sweep\ntry:\n"
        f"    sweep(['sutskever'], [1, 2, 3], {overrides!r}, __import__('pathlib').Path({str(sweep)!r}), "
        "'joblib', 2)\nexcept Interrupted as stop:\n    sys.exit(f'stopped: {stop}')\n"
    )
    logs = [sweep / "sutskever" / f"seed{seed}" / "train.log" for seed in (1, 2)]
    returncode, stderr = ctrl_c(
        [sys.executable, "-c", script], lambda: all("validation at step" in text(log) for log in logs)
    )  # both training
    name = signal.Signals(signal.SIGINT).name
    assert f"{name}: the running jobs save their runs and stop, no other job starts" in stderr  # said at once
    assert f"stopped by {name}: the jobs that were running saved their runs" in stderr, stderr
    assert returncode == 1 and f"stopped: the sweep was stopped by {name}; rerun the same command" in stderr
    assert "did not finish" not in stderr and "went on" not in stderr  # nothing went on: one account of the stop
    # one advice from the jobs and the sweep: its command again (the study's sweeps give trainer.resume=auto)
    assert "To continue, rerun the sweep's command: finished jobs are kept, interrupted ones continue" in stderr
    for log in logs:
        assert "holds the run. To continue, rerun the sweep's command" in log.read_text()
        step = int(re.search(r"interrupted at step (\d+);", log.read_text()).group(1))
        assert checkpoint.load(log.parent / "last.pt")["progress"]["step"] == step  # its last update, saved
        assert not list(log.parent.glob(".*.tmp"))
    assert f"seed3: not started: the sweep was stopped by {name}" in stderr
    assert not (sweep / "sutskever" / "seed3" / "provenance.json").exists()


def test_ctrl_c_while_joblibs_workers_still_start_stops_the_sweep_with_no_job_trained_and_no_traceback(tmp_path):
    """Ctrl-C a moment after the sweep launched its jobs, while loky's workers still import torch: a worker killed
    then took its siblings down and ended the sweep in loky's TerminatedWorkerError (exit 1). Workers now start with
    the stop signals held until their first job notes them: no job trains, each says it did not start, exit 130."""
    sweep = tmp_path / "sweep"
    options = ["variant=sutskever", "data=sample", "data.sizes.train=300", "model.embedding_size=16",
               "model.hidden_size=24", "trainer.max_flops=0", "trainer.max_minutes=0", "trainer.max_steps=1000",
               "trainer.progress=false", "seed=1,2,3", f"data.spm_cache={tmp_path / 'spm'}",
               "hydra.sweep.subdir=${hydra.job.num}"]  # fmt: skip
    joblib = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.launcher.batch_size=1"]
    command = [sys.executable, "train.py", "-m", *options, f"hydra.sweep.dir={sweep}", *joblib]
    returncode, stderr = ctrl_c(command, lambda: (sweep / "multirun.yaml").is_file(), fresh=True)
    assert returncode == 130 and "Traceback" not in stderr and "TerminatedWorkerError" not in stderr, stderr[-3000:]
    assert "stopped by SIGINT: the jobs that were running saved their runs" in stderr
    for job in ("0", "1", "2"):
        assert not (sweep / job / "last.pt").exists()  # none trained after the stop
        assert "not started: the sweep was stopped by SIGINT" in text(sweep / job / "failed.txt"), job


def test_sigterm_to_a_joblib_sweep_with_an_idle_worker_still_lets_the_busy_job_save(tmp_path):
    """A SIGTERM to the sweep's own process alone (kill, timeout, a supervisor) is passed on to its workers, as
    Ctrl-C reaches them all. A worker that has finished its jobs waits for work that will not come; the signal must
    not kill it (loky would then kill its busy sibling before that saves its run): the idle worker notes the signal,
    the busy job saves its last update, the sweep exits 128 + 15 and no process of it is left. The two jobs ran at
    once through hydra-joblib-launcher, and the one that finished ends where the basic launcher ends it, bit for bit
    (one torch thread either way: the thread count can change the sums' order, the launcher not)."""
    sweep = tmp_path / "sweep"
    options = [
        "variant=sutskever",
        "data=sample",
        "data.sizes.train=300",
        "data.sizes.valid=10",
        "data.sizes.test=10",
        "model.embedding_size=16",
        "model.hidden_size=24",
        "trainer.max_flops=0",
        "trainer.max_minutes=0",
        "trainer.max_steps=2,100000",
        "trainer.validations=0",
        "trainer.valid_every=0",
        "trainer.patience=0",
        "trainer.progress=false",
        "trainer.threads=1",
        "trainer.num_plots=0",
        "trainer.test_at_end=false",
        f"data.spm_cache={tmp_path / 'spm'}",
        "hydra.sweep.subdir=${hydra.job.num}",
    ]
    joblib = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.launcher.batch_size=1"]
    command = [sys.executable, "train.py", "-m", *options, f"hydra.sweep.dir={sweep}", *joblib]
    short, long = sweep / "0", sweep / "1"
    returncode, stderr = ctrl_c(
        command,
        lambda: "stopped: reached" in text(short / "train.log") and "validation at" in text(long / "train.log"),
        signal.SIGTERM,
        fresh=True,
    )  # one worker idle, one training
    assert returncode == 128 + signal.SIGTERM, stderr
    assert "SIGTERM: the running jobs save their runs and stop, no other job starts" in stderr
    assert "BrokenProcessPool" not in stderr and "stopped by SIGTERM: the jobs that were running saved" in stderr
    step = int(re.search(r"interrupted at step (\d+);", (long / "train.log").read_text()).group(1))
    assert checkpoint.load(long / "last.pt")["progress"]["step"] == step > 0  # its last update, saved
    assert "interrupted at step" in (long / "failed.txt").read_text() and not (short / "failed.txt").exists()
    launched = (sweep / "multirun.yaml").read_text()
    assert "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher" in launched and "n_jobs: 2" in launched
    basic = tmp_path / "basic"
    options = [o.replace("trainer.max_steps=2,100000", "trainer.max_steps=2") for o in options]
    done = run_command([sys.executable, "train.py", "-m", *options, f"hydra.sweep.dir={basic}"], cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    weights = [checkpoint.load(run / "last.pt")["model"] for run in (short, basic / "0")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_a_finished_run_is_kept_only_with_the_settings_asked_for_today(tmp_path):
    """After a default changes, `make compare` must not report a run finished before as if it had today's settings
    (beside seeds that do): it names the run and the option instead, before anything trains."""
    from nmt_study.sweep import check_finished, settings

    overrides = ["model=luong", "data=sample", "seed=7", "hydra.run.dir=elsewhere"]
    run = tmp_path / "luong" / "seed7"
    record = run / ".hydra" / "2026-11-23_10-00-00" / "config.yaml"
    record.parent.mkdir(parents=True)
    (run / "results.json").write_text("{}")
    today = settings(overrides)
    OmegaConf.save(OmegaConf.create(today), record)
    check_finished([("luong seed 7", overrides, run)])  # the same settings: kept
    before = {**today, "model": {k: v for k, v in today["model"].items() if k != "bidirectional"}}
    OmegaConf.save(OmegaConf.create({**before, "model": {**before["model"], "dropout": 0.3}}), record)
    with pytest.raises(
        UserError,
        match=r"luong seed 7 \(.*seed7\): model.bidirectional: False then, True now; "
        r"model.dropout: 0.3 then, 0.2 now\nMove these folders away",
    ):
        check_finished([("luong seed 7", overrides, run)])  # written before the option existed: the paper's encoder
    check_finished([("luong seed 7", [*overrides, "model.bidirectional=false", "model.dropout=0.3"], run)])
    (run / "results.json").unlink()
    check_finished([("luong seed 7", overrides, run)])  # unfinished: resuming checks its checkpoint instead


def assert_close(a, b, rel: float = 1e-4, where: str = "") -> None:
    """JSON values `a` and `b` equal, but for floats within `rel` of each other."""
    assert type(a) is type(b) or {type(a), type(b)} <= {int, float}, where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_close(a[key], b[key], rel, f"{where}/{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, rel, f"{where}/{i}")
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=rel, abs=1e-9), where
    else:
        assert a == b, where


def test_make_results_records_each_finished_run_and_reports_from_the_records_alone(tmp_path, monkeypatch):
    """A part of make results outlives its machine: each finished run becomes a record (results/runs/, committed)
    that holds no sentence of the test set, a later invocation on another machine trains only the runs without one,
    and the report made from the records is the one made from the runs' folders."""
    import shutil

    from nmt.build import load_corpus
    from nmt_study.records import recorded
    from nmt_study.sweep import settings

    overrides = [
        "data=sample",
        "data.sizes.train=300",
        "data.sizes.valid=10",
        "data.sizes.test=12",
        "model.embedding_size=16",
        "model.hidden_size=24",
        "trainer.max_flops=4e8",
        "trainer.validations=1",
        "trainer.progress=false",
        "trainer.num_plots=0",
        f"data.spm_cache={tmp_path / 'spm'}",
    ]
    records = tmp_path / "records"
    with monkeypatch.context() as patched:
        patched.setattr(run_records, "record_runs", lambda *args: [])  # the job records its run itself, as it ends
        run_records.recorded_sweep(["sutskever"], [1], overrides, tmp_path / "first", records, 2)
    assert (records / "sutskever" / "seed1.record.json").is_file()
    shutil.move(tmp_path / "first", tmp_path / "gone")  # the first machine is gone; its records stay
    later = tmp_path / "later"
    made = run_records.recorded_sweep(["sutskever", "bahdanau"], [1], overrides, later, records, 2)
    assert [p.relative_to(later).as_posix() for p in later.glob("*/*/results.json")] == ["bahdanau/seed1/results.json"]
    assert all(path.is_file() for path in made) and len(made) == 2
    assert published.finished(records) == {"bahdanau": [1], "sutskever": [1]}
    assert recorded(records, ["sutskever", "bahdanau"], [1, 2], overrides) == {("sutskever", 1), ("bahdanau", 1)}
    with pytest.raises(UserError, match=r"sutskever seed 1 \(.*seed1.record.json\): model.dropout: 0.3 then, 0.5"):
        recorded(records, ["sutskever"], [1], [*overrides, "model.dropout=0.5"])
    test = load_corpus(OmegaConf.create(settings(overrides)["data"])).test
    text = "\n".join(p.read_text() for p in records.rglob("*.record.json"))
    assert not any(sentence in text for pair in test for sentence in pair)  # statistics, not translations

    def report(folders, name, beam=2):
        described, pairs = run_records.describe_runs(run_records.find_runs(folders), beam)
        (tmp_path / name).mkdir()
        reports.summarise(described, pairs, tmp_path / name, beam, "command", None, 50, 50)
        return json.loads((tmp_path / name / "compare.json").read_text())

    # The record's attention figures were measured in the job, the run folder's here: the thread counts may differ,
    # and with them the last bits of a sum.
    assert_close(report([records / "bahdanau"], "from_records"), report([later], "from_runs"))
    assert (tmp_path / "from_records" / "report.md").read_text() == (tmp_path / "from_runs" / "report.md").read_text()
    assert (tmp_path / "from_records" / "attention.png").is_file()
    with pytest.raises(UserError, match="holds the output of beam 2, and the report asks for beam 5"):
        report([records], "other_beam", beam=5)
    report([records], "all")
    monkeypatch.setattr(published, "RESULTS", tmp_path / "results")  # make results' export, from the records alone
    load_script("results").export(tmp_path / "all", "main", records)
    exported = json.loads((tmp_path / "results" / "main.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert exported["finished"] == {"bahdanau": [1], "sutskever": [1]}
    assert all(r["provenance"]["commits"][0].startswith(head) for v in exported["variants"].values() for r in v["runs"])
    # the part's own records are today's runs (the earlier protocol's are kept apart, published.EARLIER)
    main = "| main | transformer tuned and converged; the other 3 families' 5e14 runs | 0 of 5 runs |"
    assert main in tables.render("parts", tmp_path / "results")


def test_make_results_only_trains_the_named_share_of_each_part_and_reports_on_every_record(tmp_path, monkeypatch):
    """`--only` shares a part's runs out over machines: each part trains the named variants it has (a part with none
    is left alone), the report still reads every record, and the lab (reported on all at once) or a name no part
    trains is refused, naming the option. Main and the claims' own runs train alike (no precision pinned), main
    first: the claims' report reads its records too."""
    script = load_script("results")
    trained, reported = [], []

    def sweep(variants, seeds, overrides, folder, records, *args):
        trained.append((records.name, variants, [o for o in overrides if o in published.PINNED]))

    monkeypatch.setattr(script, "recorded_sweep", sweep)
    monkeypatch.setattr(script, "report_on", lambda part, runs, beam: reported.append(part))
    monkeypatch.setattr(script, "train_comparison", lambda variants, args, runs: trained.append(("compare", variants)))
    monkeypatch.setattr(script, "export", lambda *args: None)
    monkeypatch.setattr(script, "render", lambda: None)
    monkeypatch.setattr(published, "copy_figures", lambda *args: None)
    monkeypatch.setattr(published, "complete", lambda *args: False)
    only = "transformer,luong_dot,luong_feeding"
    script.main(["--parts", "claims,main,others", "--only", only, "--runs", str(tmp_path)])
    assert trained == [
        ("main", ["transformer"], []),
        ("claims", ["luong_feeding"], []),
        ("compare", ["luong_dot", "luong_feeding", "transformer"]),
    ]
    assert reported == ["main", "claims"]
    trained.clear()
    script.main(["--parts", "claims,main", "--only", "luong_feeding", "--runs", str(tmp_path)])
    assert trained == [("claims", ["luong_feeding"], [])]  # main has no input-feeding arm: it trains nothing
    assert script.only(None, ["main", "lab"]) == {"main": FAMILIES, "lab": []}
    with pytest.raises(UserError, match="--only: luong_dot unknown; use any of bahdanau, luong, sutskever"):
        script.only("luong_dot", ["main"])
    with pytest.raises(UserError, match="--only: the lab trains and reports on all its variants together"):
        script.only("luong", ["main", "lab"])


def test_make_results_record_reports_on_what_is_recorded_without_training(tmp_path, monkeypatch):
    """--record trains nothing: the lab's report covers the seeds every lab variant has recorded (from 1234 on,
    none skipped), and a variant without seed 1234 is named; the claims' report covers their records so far."""
    from types import SimpleNamespace

    from nmt_study.variants import VARIANTS as LAB_VARIANTS

    script = load_script("results")
    monkeypatch.setattr(published, "RECORDS", tmp_path / "records")
    calls = []
    for program in ("compare", "lab"):
        monkeypatch.setattr(script, program, SimpleNamespace(main=lambda argv: calls.append(argv)))
    monkeypatch.setattr(script, "export_lab", lambda folder: None)
    monkeypatch.setattr(script, "render", lambda: None)

    def recorded(variant: str, *seeds: int) -> None:
        (tmp_path / "records" / "lab" / f"lab_{variant}").mkdir(parents=True, exist_ok=True)
        for seed in seeds:
            (tmp_path / "records" / "lab" / f"lab_{variant}" / f"seed{seed}.record.json").write_text("{}")

    for variant in LAB_VARIANTS[1:]:
        recorded(variant, 1234, 1235, 1236)
    with pytest.raises(UserError, match=f"has no record of seed 1234 of {LAB_VARIANTS[0]}; the lab's report needs"):
        script.main(["--parts", "lab", "--record", "--runs", str(tmp_path)])
    recorded(LAB_VARIANTS[0], 1234, 1236)  # 1235 missing: the report covers seed 1234 alone
    script.main(["--parts", "lab", "--record", "--runs", str(tmp_path)])
    assert calls[-1][calls[-1].index("--seeds") + 1] == "1"
    assert calls[-1][calls[-1].index("--claim-seeds") + 1] == "0"  # --record trains nothing, more seeds neither
    script.main(["--parts", "lab", "--runs", str(tmp_path)])  # trains: 3 seeds each, 8 of the claims' variants
    assert [calls[-1][calls[-1].index(option) + 1] for option in ("--seeds", "--claim-seeds")] == ["3", "8"]
    recorded(LAB_VARIANTS[0], 1235)
    assert script.lab_seeds_recorded() == 3
    extra = ["--extra", "data.dir=/data/multi30k", "trainer.threads=1"]  # the lab writes its own corpus
    script.main(["--parts", "lab", "--record", "--runs", str(tmp_path), *extra])
    assert calls[-1][calls[-1].index("--extra") :] == ["--extra", *published.PINNED, "trainer.threads=1"]
    monkeypatch.setattr(script, "record_runs", lambda *args: calls.append("recorded"))
    monkeypatch.setattr(script, "export", lambda *args: calls.append("exported"))
    with pytest.raises(UserError, match="--record: no finished claims run in .* nothing to report yet; train them"):
        script.main(["--parts", "claims", "--record", "--runs", str(tmp_path)])  # no run: no empty report
    (tmp_path / "records" / "main" / "transformer").mkdir(parents=True)  # the claims' report covers main's runs too
    (tmp_path / "records" / "main" / "transformer" / "seed1234.record.json").write_text("{}")
    script.main(["--parts", "claims", "--record", "--runs", str(tmp_path)])
    assert calls[-3] == "recorded" and calls[-2][0] == str(tmp_path / "records" / "main")  # then its report
    assert calls[-1] == "exported"
    (tmp_path / "records" / "claims").mkdir()
    script.main(["--parts", "claims", "--record", "--runs", str(tmp_path)])  # on the main table's records too
    assert calls[-2][:3] == [str(tmp_path / "records" / "claims"), str(tmp_path / "records" / "main"), "--output"]
    with pytest.raises(UserError, match="--earlier: no records in .*claims_5e14; restore them from git"):
        script.main(["--parts", "claims", "--earlier", "--runs", str(tmp_path)])
    (tmp_path / "records" / "claims_5e14").mkdir()
    script.main(["--parts", "claims,lab", "--earlier", "--runs", str(tmp_path)])  # the earlier report from its own
    assert calls[-2][:2] == [str(tmp_path / "records" / "claims_5e14"), "--output"] and calls[-1] == "exported"
    with pytest.raises(UserError, match="--earlier: the earlier reports are those of claims and main"):
        script.main(["--parts", "lab", "--earlier", "--runs", str(tmp_path)])


def test_a_joblib_sweep_around_recorded_runs_keeps_every_core_busy_and_skips_them_in_their_job(tmp_path, monkeypatch):
    """Runs left to train after some were recorded are no rectangle (variants x seeds): the joblib launcher gets the
    rectangle around them in one `train.py -m`, so no run waits for another while a core idles, and the job of a run
    recorded already returns at once, training nothing."""
    from nmt_study import sweep as sweeps

    records = tmp_path / "records"
    (records / "sutskever").mkdir(parents=True)
    (records / "sutskever" / "seed1.record.json").write_text(json.dumps({"config": {}}))
    launched = []
    monkeypatch.setattr(sweeps, "check_finished", lambda runs: None)
    monkeypatch.setattr(sweeps, "waited", lambda command: launched.append(command) or 0)
    done = {("sutskever", 1)}
    sweeps.sweep(
        ["sutskever", "bahdanau"],
        [1, 2],
        [],
        tmp_path / "runs",
        "joblib",
        2,
        done,
        run_records.record_callback(records, 1),
        records,
    )
    assert len(launched) == 1 and "seed=1,2" in launched[0] and "variant=sutskever,bahdanau" in launched[0]
    assert "hydra.launcher.batch_size=1" in launched[0]  # no run queued behind a skipped job in one worker
    launched.clear()
    sweeps.sweep(["sutskever", "bahdanau"], [1, 2], [], tmp_path / "runs", "packed", 2, done, (), records)
    assert len(launched) == 1 and "seed=1,2" in launched[0] and "variant=sutskever,bahdanau" in launched[0]
    assert launched[0][-2:] == ["hydra/launcher=packed", "hydra.launcher.slots=2"]
    launched.clear()
    sweeps.sweep(["sutskever", "bahdanau"], [1, 2], [], tmp_path / "runs", "basic", 1, done)
    given = [c[len(sweeps.TRAIN) + 1 : len(sweeps.TRAIN) + 3] for c in launched]  # after train.py's -m
    assert given == [["seed=1", "variant=bahdanau"], ["seed=2", "variant=sutskever,bahdanau"]]
    run = tmp_path / "runs" / "sutskever" / "seed1"
    job = run_command(
        [
            sys.executable,
            "train.py",
            "-m",
            "variant=sutskever",
            "seed=1",
            "data=sample",
            f"hydra.sweep.dir={tmp_path / 'runs'}",
            "hydra.sweep.subdir=sutskever/seed1",
            *run_records.record_callback(records, 1),
        ],
        cwd=ROOT,
        text=True,
    )
    assert job.returncode == 0, job.stderr
    assert "recorded already in" in (run / "train.log").read_text() and not (run / "provenance.json").exists()
    packed = run_command([*job.args, "hydra/launcher=packed"], cwd=ROOT, text=True)  # the packed launcher skips it too
    assert packed.returncode == 0 and "recorded already in" in packed.stdout + packed.stderr, packed.stderr[-2000:]
    assert not (run / "provenance.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the script would run its checks")
def test_the_device_check_stops_where_there_is_no_gpu_before_it_writes_anything(tmp_path):
    """scripts/device_check.sh is for a lent GPU machine; anywhere else it says so and leaves $OUT empty."""
    environment = {**__import__("os").environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "device_check.sh")], cwd=ROOT, capture_output=True, text=True, env=environment
    )
    assert done.returncode != 0 and "error: no CUDA device here" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_benchmark_table_reports_flops_against_the_measured_peak():
    benchmark = load_script("benchmark")
    result = {
        "model": "transformer",
        "parameters": 1_000_000,
        "train_tokens_per_second": 2000.0,
        "flops_per_token": 6e6,
        "model_flops_per_second": 12e9,
        "peak_rss_gib": 1.5,
        "decode_beam1_sentences_per_second": 100.0,
        "decode_beam5_sentences_per_second": 40.0,
    }
    text = benchmark.table([result], peak=400e9, machine="test")
    assert "| transformer | 1,000,000 | 2,000 | 6 | 12 (3%) | 1.50 GiB | 100.0 | 40.0 |" in text
    on_gpu = benchmark.table([{**result, "peak_gpu_gib": 3.25, "gpu_utilization": 87.0}], peak=400e9, machine="test")
    assert "| 12 (3%) | 3.25 GiB GPU, 87% busy | 100.0 |" in on_gpu  # the GPU's tensors, not the host's RSS


def test_benchmark_measures_and_profiles_a_small_model_on_the_sample_corpus(tmp_path, monkeypatch):
    benchmark = load_script("benchmark")
    monkeypatch.chdir(tmp_path)  # the sample vocabulary is cached under data/spm of the working folder
    spec = "sutskever data=sample model.embedding_size=16 model.hidden_size=24 data.max_tokens=256"
    args = benchmark.argparse.Namespace(
        threads=1,
        precision="fp32",
        device="cpu",
        data_dir=None,
        steps=2,
        windows=2,
        profile=2,
        train_only=True,
        output=str(tmp_path / "bench"),
    )
    result = benchmark.measure(spec, args)
    assert result["train_tokens_per_second"] > 0 and len(result["train_windows"]) == 2
    # Counted products of a training step: at least the output layer's forward and two backward products per token.
    vocabulary = result["target_vocab_size"]
    assert result["flops_per_token"] > 3 * 2 * 24 * vocabulary
    profile = (
        tmp_path / "bench" / "profile_sutskever_data=sample_model.embedding_size=16_model.hidden_size=24_"
        "data.max_tokens=256.txt"
    ).read_text()
    assert "Self CPU" in profile and "aten::" in profile


def test_benchmark_record_saves_the_table_and_each_models_figures(tmp_path, monkeypatch):
    benchmark = load_script("benchmark")
    figures = {
        "model": "bahdanau",
        "parameters": 16_000_000,
        "train_tokens_per_second": 2000.0,
        "flops_per_token": 8e7,
        "model_flops_per_second": 16e10,
        "peak_rss_gib": 2.0,
        "decode_beam1_sentences_per_second": 250.0,
        "decode_beam5_sentences_per_second": 80.0,
        "decoded_with": "runs/bahdanau/seed1234/best.pt",
    }
    args = benchmark.argparse.Namespace(precision="bf16", windows=5, steps=8, checkpoints="runs/{model}/seed1234")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    path = benchmark.record("benchmark", [figures], 400e9, "test machine", args, folder=tmp_path)
    saved = json.loads(path.read_text())
    assert saved["rows"] == [["bahdanau", "16,000,000", "2,000", "80", "160 (40%)", "2.00 GiB", "250.0", "80.0"]]
    assert saved["values"]["bahdanau"]["train_tokens_per_second"] == 2000.0
    assert saved["command"].startswith("ONEDNN_MAX_CPU_ISA=AVX2 python ")  # what held the kernels is part of it
    assert "400 GFLOP/s" in saved["note"] and "with `runs/{model}/seed1234/best.pt`" in saved["note"]
    assert benchmark.checkpoint("runs/{model}/seed1", "luong") == benchmark.Path("runs/luong/seed1/best.pt")
    assert benchmark.checkpoint("outputs/runs", "luong") == benchmark.Path("outputs/runs/luong/best.pt")
    assert benchmark.checkpoint("outputs/runs", "luong model/attention=dot") is None


def test_benchmark_keeps_measuring_past_a_model_that_fails_or_overruns_and_writes_what_it_measured(
    tmp_path, monkeypatch
):
    """A one-off run on a lent GPU must bring back what it measured: a model that fails or runs past
    --model-timeout is named at the end (exit status 1) while the others are measured and tabled."""
    benchmark = load_script("benchmark")
    figures = {"parameters": 1000, "train_tokens_per_second": 500.0, "flops_per_token": 1e6}
    figures |= {"model_flops_per_second": 5e8, "peak_rss_gib": 1.0}

    def fake_run(command, timeout=None, **_):
        name = command[command.index("--one") + 1]
        if name == "slow":
            raise benchmark.subprocess.TimeoutExpired(command, timeout)
        if name == "broken":
            return subprocess.CompletedProcess(command, 1, "", "RuntimeError: no kernel for this shape")
        return subprocess.CompletedProcess(command, 0, json.dumps({**figures, "model": name}) + "\n", "")

    monkeypatch.setattr(benchmark.subprocess, "run", fake_run)
    monkeypatch.setattr(benchmark, "matmul_peak", lambda dtype, device: 1e9)
    argv = ["--train-only", "--device", "cpu", "--model-timeout", "7", "--output", str(tmp_path / "bench")]
    with pytest.raises(UserError) as raised:
        benchmark.main([*argv, "--models", "luong;broken;slow;sutskever"])
    message = str(raised.value)
    assert message.startswith("2 of 4 models could not be measured")
    assert "benchmarking broken failed:\nRuntimeError: no kernel" in message
    assert "benchmarking slow took over --model-timeout 7.0 s" in message
    written = json.loads((tmp_path / "bench" / "benchmark.json").read_text())
    assert [r["model"] for r in written["results"]] == ["luong", "sutskever"]
    assert "| sutskever | 1,000 | 500 |" in (tmp_path / "bench" / "benchmark.md").read_text()


def test_benchmark_record_refuses_to_time_an_untrained_models_decoding(tmp_path):
    done = run_command(
        [
            sys.executable,
            "-m",
            "nmt_study",
            "measure",
            "speed",
            "--record",
            "--models",
            "luong",
            "--checkpoints",
            str(tmp_path / "{model}"),
            "--output",
            str(tmp_path / "bench"),
        ],
        cwd=ROOT,
        text=True,
    )
    assert done.returncode == 1 and "no trained checkpoint of luong" in done.stderr and "--train-only" in done.stderr
    assert not (tmp_path / "bench").exists()  # refused before anything was measured or written


def joey_output(out, rate=600.0, generation=20.0):
    """The files ../shared/peers/joeynmt/run.sh leaves in $WORK/out, in the formats Joey NMT and /usr/bin/time write."""
    out.mkdir(parents=True)
    for name in ("rnn", "tf"):
        for prefix, seconds in (("", "5:00.50"), ("tp_", "1:00.20")):
            lines = ["2026-11-24 10:00:00,000 - INFO - joeynmt.model - Total params: 13182464"]
            lines += [
                f"2026-11-24 10:0{i}:00,000 - INFO - joeynmt.training - Epoch   1, Step:      {100 * i}, Batch "
                f"Loss:     4.1, Batch Acc: 0.1, Tokens per Sec: {rate + 10 * i:8.0f}, Lr: 0.000200"
                for i in (1, 2)
            ]
            (out / f"{prefix}{name}.log").write_text("\n".join(lines) + "\n")
            (out / f"{prefix}{name}.time").write_text(
                f"\tElapsed (wall clock) time (h:mm:ss or m:ss): {seconds}\n"
                "\tMaximum resident set size (kbytes): 2742292\n"
            )
        for beam in (1, 5):
            (out / f"{name}_b{beam}.log").write_text(
                f"... - INFO - joeynmt.prediction - Generation took {generation * beam:.4f}[sec].\n"
            )
            (out / f"{name}_b{beam}.hyp.test").write_text("a man .\n" * 1000)
    (out / "versions.txt").write_text("python 3.11.7 torch 2.13.0+cpu joeynmt 2.3.0\n")


def test_joeynmt_figures_are_read_from_the_peers_logs_and_saved(tmp_path):
    joeynmt = load_script("joeynmt")
    joey_output(tmp_path / "work" / "out")
    found = joeynmt.measure(tmp_path / "work")
    assert found["rnn"]["train_tokens_per_second"] == 615.0  # the mean of its two log lines
    assert found["transformer"]["decode_beam1_sentences_per_second"] == 50.0  # 1,000 sentences in 20 s
    assert found["transformer"]["decode_beam5_sentences_per_second"] == 10.0
    assert found["rnn"]["train_seconds"] == 300.5 and found["rnn"]["train_seconds_short"] == 60.2
    assert abs(found["rnn"]["peak_rss_gib"] - 2.615) < 1e-3 and found["rnn"]["parameters"] == 13182464
    path = joeynmt.record("joeynmt", tmp_path / "work", tmp_path / "results")
    saved = json.loads(path.read_text())
    assert saved["rows"][0] == ["rnn", "13,182,464", "615 / 615", "2.62 GiB", "50.0", "10.0"]
    assert "joeynmt 2.3.0" in saved["note"] and "about 5 and 1 min" in saved["note"]
    (tmp_path / "work" / "out" / "tp_rnn.log").write_text("Total params: 13182464\n")  # shorter than a log interval
    assert joeynmt.row("rnn", joeynmt.measure(tmp_path / "work")["rnn"])[2] == "615 / -"
    long_run = (tmp_path / "work" / "out" / "rnn.log").read_text()
    (tmp_path / "work" / "out" / "rnn.log").write_text("Total params: 13182464\n")  # the long run must have them
    with pytest.raises(UserError, match=r"rnn.log: no 'Tokens per Sec' line"):
        joeynmt.measure(tmp_path / "work")
    (tmp_path / "work" / "out" / "rnn.log").write_text(long_run)
    (tmp_path / "work" / "out" / "tf_b5.log").write_text("Traceback ...\n")
    with pytest.raises(UserError, match=r"tf_b5.log: no 'Generation took' line"):
        joeynmt.measure(tmp_path / "work")
    with pytest.raises(UserError, match=r"run.sh first"):
        joeynmt.measure(tmp_path / "nowhere")


def test_joeynmt_on_a_gpu_is_read_from_gpu_sh_logs_and_recorded_with_the_machine_that_measured_it(tmp_path):
    """`--cuda DIR`: the median of the second half of Joey NMT's rate lines (its start and warm-up in the first),
    recorded with the date, machine and torch of benchmark_cuda.json, which the same GPU call measured; the table
    puts each beside our model and gives the ratio."""
    joeynmt = load_script("joeynmt")
    out, results_dir = tmp_path / "joey", tmp_path / "results"
    out.mkdir()
    for name, rates in (
        ("rnn_bahdanau", [900, 9000, 11000, 12000]),
        ("transformer", [100, 20000, 30000, 31000, 29000]),
    ):
        lines = ["2026-11-27 19:25:00,100 - INFO - joeynmt.config -    cfg.fp16 : True"]
        lines += ["2026-11-27 19:25:01,000 - INFO - joeynmt.model - Total params: 13182464"]
        lines += [
            f"2026-11-27 19:25:{10 + i},000 - INFO - Step: {20 * i}, Tokens per Sec: {r}" for i, r in enumerate(rates)
        ]
        (out / f"joeynmt_{name}.log").write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match="benchmark_cuda.json: missing"):
        joeynmt.record_cuda(out, results_dir)
    ours = {"model": "bahdanau", "train_tokens_per_second": 220000.0}
    ours_tf = {"model": "transformer", "train_tokens_per_second": 260000.0}
    (results_dir / "measured").mkdir(parents=True)
    (results_dir / "measured" / "benchmark_cuda.json").write_text(
        json.dumps(
            {
                "command": "c",
                "commit": "abc1234",
                "uncommitted_changes": False,
                "date": "2026-11-27T19:22+00:00",
                "machine": "GPU host, 16 cores",
                "threads": 16,
                "torch": "2.11.0+cu130",
                "note": "NVIDIA H200",
                "columns": [],
                "rows": [],
                "values": {"bahdanau": ours, "transformer": ours_tf},
            }
        )
    )
    saved = json.loads(joeynmt.record_cuda(out, results_dir).read_text())
    assert saved["values"]["rnn"]["train_tokens_per_second"] == 11500.0  # median of 11000 and 12000
    assert saved["values"]["transformer"]["train_tokens_per_second"] == 30000.0  # of 30000, 31000, 29000
    assert (saved["machine"], saved["date"], saved["torch"]) == (
        "GPU host, 16 cores",
        "2026-11-27T19:22+00:00",
        "2.11.0+cu130",
    )
    assert "in fp16" in saved["note"] and saved["rows"][0][:3] == ["rnn", "13,182,464", "11,500"]
    table = tables.render("versus_joeynmt_cuda", results_dir)
    assert "| bahdanau / Joey's rnn, train target tok/s | 220,000 | 11,500 | 19.13x |" in table
    assert "| transformer / Joey's transformer, train target tok/s | 260,000 | 30,000 | 8.67x |" in table
    (out / "joeynmt_transformer.log").write_text("2026-11-27 19:25:00,100 - Tokens per Sec: 5\n")
    with pytest.raises(UserError, match=r"joeynmt_transformer.log: 1 'Tokens per Sec' lines"):
        joeynmt.measure_cuda(out)


def test_flop_count_includes_the_cpu_lstm_kernel():
    lstm = torch.nn.LSTM(64, 128, 2, batch_first=True)
    inputs = torch.randn(4, 10, 64)
    cpu = torch.device("cpu")
    forward = 2 * 40 * 512 * (64 + 128) + 2 * 40 * 512 * (128 + 128)  # two layers, 40 tokens, 4 gates of 128
    for dtype in {torch.float32, resolve("auto", cpu).dtype}:  # and bf16 where this CPU runs it natively

        def step(dtype=dtype):
            with autocast(cpu, dtype):
                outputs, _ = lstm(inputs)
            outputs.float().sum().backward()

        assert counted(step) == 3 * forward  # forward, and backward twice that


def test_attention_kernels_records_the_window_against_global_per_shape_and_path(tmp_path, monkeypatch):
    """docs/attention.md's table: each shape's step time with and without the window, by the explicit product and
    by SDPA, and the kernel the profiler saw (here made up: the clock and the profiler are not what is tested)."""
    kernels = load_script("attention_kernels")
    steps = iter([0.40, 0.38, 0.50, 0.55] * 2)  # per shape: explicit global, windowed; fused global, windowed
    monkeypatch.setattr(kernels, "step_seconds", lambda *args: next(steps))
    monkeypatch.setattr(kernels, "kernel_of", lambda *args: "aten::_scaled_dot_product_flash_attention_for_cpu")
    monkeypatch.setattr(kernels.published, "RESULTS", tmp_path / "results")
    kernels.main(["--record", "--device", "cpu", "--precision", "fp32", "--output", str(tmp_path / "bench")])
    saved = json.loads((tmp_path / "results" / "measured" / "attention_kernels.json").read_text())
    assert saved["columns"] == ["shape", "path", "global ms", "window 4 ms", "window / global"]
    assert saved["rows"][:2] == [
        ["Multi30k (15 subwords)", "explicit", "400.0", "380.0", "0.95"],
        ["Multi30k (15 subwords)", "fused", "500.0", "550.0", "1.10"],
    ]
    flash = "`aten::_scaled_dot_product_flash_attention_for_cpu` (the profiler)"
    assert len(saved["rows"]) == 4 and flash in saved["note"] and "in float32" in saved["note"]
    table = tables.measured_table("attention_kernels", tmp_path / "results")
    assert "| lab long (100 subwords) | fused | 500.0 | 550.0 | 1.10 |" in table


def lab_arguments(folder) -> list[str]:
    """A lab of three variants, tiny, into folder/lab."""
    return [
        "--variants",
        "bahdanau,bahdanau_fixed,luong_local_m",
        "--steps",
        "6",
        "--minutes",
        "0",
        "--per-bucket",
        "20",
        "--samples",
        "50",
        "--trials",
        "50",
        "--output",
        str(folder / "lab"),
        "--extra",
        "data.sizes.train=300",
        "data.sizes.valid=10",
        "data.sizes.test=10",
        "trainer.valid_every=3",
        "model.embedding_size=16",
        "model.hidden_size=24",
        "trainer.num_plots=0",
        f"data.spm_cache={folder / 'spm'}",
    ]


@pytest.fixture(scope="module")
def small_lab(tmp_path_factory):
    """The small lab, trained once for the tests that read it: its folder (folder/lab)."""
    folder = tmp_path_factory.mktemp("small_lab")
    with pytest.MonkeyPatch.context() as monkeypatch:
        fork_sweeps(monkeypatch)  # set up before the tests' own autouse fixtures
        load_script("lab").main(lab_arguments(folder))
    return folder


def test_the_lab_trains_scores_alignment_and_length(small_lab, tmp_path, capfd, monkeypatch):
    lab = load_script("lab")
    tmp_path = small_lab  # the lab's own folder: this test reads it and writes measurements elsewhere
    report = (tmp_path / "lab" / "report.md").read_text()
    local_m = "luong (general, local_m, no feeding, bidirectional)"  # named from its config
    assert f"| {local_m} | alignment |" in report and "| 0.34 |" in report  # beside the paper's AER
    assert "| bahdanau (fixed context) | no attention |" in report
    assert "| model: test BLEU by source words (sentences) | 1-10 (" in report and "61-80 (" in report
    for name in ("bleu_by_length.png", "valid_aer.png", "lab.json", "data/long.align"):
        assert (tmp_path / "lab" / name).is_file(), name
    results = lab.json.loads((tmp_path / "lab" / "lab.json").read_text())["results"]
    luong = next(r for r in results if r["name"].startswith("luong"))
    assert 0 <= luong["test_alignment"]["aer"] <= 1 and [step for step, _ in luong["valid_aer"]] == [3, 6]
    assert len((tmp_path / "lab" / "data" / "long.align").read_text().splitlines()) == 120  # 20 per bucket
    comparison = (tmp_path / "lab" / "comparison" / "report.md").read_text()  # the same runs, compared
    record = json.loads((tmp_path / "lab" / "comparison" / "compare.json").read_text())
    claims = {c["claim"]: c for c in record["claims"]}
    assert claims["The gap grows with sentence length"]["verdict"] == "needs 3 seeds"  # the lab's, on long sentences
    assert claims["The gap grows with sentence length"]["evidence"].startswith(
        "the lab: BLEU kept in each longer bucket, 11-20 words (20 sentences), 21-30 words (20 sentences), 31-40"
    )
    assert f"| {local_m} | 1 |" in comparison and "| Δ best |" in comparison
    offset = load_script("alignment_offset")  # docs/alignment.md's table: AER with every link moved by k words
    monkeypatch.setattr(offset.published, "RESULTS", tmp_path / "measured_here")
    offset.main(["--record", "--shifts", "1", str(tmp_path / "lab" / "runs" / "lab_luong_local_m" / "seed1234")])
    saved = json.loads((tmp_path / "measured_here" / "measured" / "alignment_offset.json").read_text())
    assert saved["columns"] == ["run", "-1", "+0", "+1"] and saved["rows"][0][0] == f"{local_m}, seed 1234"
    assert sum(cell.startswith("**") for cell in saved["rows"][0][1:]) == 1  # the lowest AER in bold
    assert all(0 <= float(cell.strip("*")) <= 1 for cell in saved["rows"][0][1:])
    with pytest.raises(UserError, match="seed1234: this model has no attention"):
        offset.main([str(tmp_path / "lab" / "runs" / "lab_bahdanau_fixed" / "seed1234")])


def test_the_lab_resumes_where_it_stopped_and_reports_from_its_records(small_lab, tmp_path, capfd, monkeypatch):
    shutil.copytree(small_lab, tmp_path, dirs_exist_ok=True, symlinks=True)  # the trained lab, to change here
    lab, small = load_script("lab"), lab_arguments(tmp_path)
    local_m = "luong (general, local_m, no feeding, bidirectional)"
    capfd.readouterr()
    records = tmp_path / "lab" / "records"
    variants = ("lab_bahdanau", "lab_bahdanau_fixed", "lab_luong_local_m")
    assert sorted(p.relative_to(records).as_posix() for p in records.rglob("*.json")) == [
        f"{v}/seed1234.{kind}.json" for v in variants for kind in ("lab", "record")
    ]
    (tmp_path / "lab" / "runs").rename(tmp_path / "gone")  # another machine: the lab's report from its records
    data = tmp_path / "lab" / "data"
    (data / "long.en").write_text("the set another protocol's lab left here\n")
    (data / "long.json").write_text("{}")
    monkeypatch.setattr(lab, "LAB_CLAIM_VARIANTS", ("luong_local_m", "luong_location"))  # one of them in --variants
    lab.main([*small, "--claim-seeds", "2"])  # more seeds of the variants the claims compare, the others kept
    kept = ", ".join(f"{v.removeprefix('lab_')} seed 1234" for v in variants)  # the variants, in their folders
    out = capfd.readouterr().out
    assert f"kept from {records}: {kept}" in out and "train.py -m seed=1234" not in out  # recorded: not trained
    assert "train.py -m seed=1235 variant=luong_local_m " in out  # the one run the records lack
    assert sorted(p.parent.name for p in records.rglob("seed1235.record.json")) == ["lab_luong_local_m"]
    seeds = {r["name"]: len(r["seeds"]) for r in json.loads((tmp_path / "lab" / "lab.json").read_text())["results"]}
    assert seeds == {"bahdanau (additive)": 1, "bahdanau (fixed context)": 1, local_m: 2}
    # the length test set was drawn again for today's training sentences: the earlier records match it
    assert json.loads((data / "long.json").read_text())["per_bucket"] == 20
    path = records / "lab_bahdanau" / "seed1234.lab.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "long_set": "of another set"}))
    with pytest.raises(UserError, match=r"lab_bahdanau/seed1234.lab.json measured on another length test set"):
        lab.main(small)  # its BLEU by length is not read against other references
