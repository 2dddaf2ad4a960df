"""The results tables in README.md and docs/ are rendered from results/*.json, never typed."""

import json
from pathlib import Path

import pytest
from conftest import ROOT

from nmt import UserError
from nmt_study import parts, published, tables
from nmt_study.claims_table import brief, claims_table
from nmt_study.comparison import stopped_by, stops
from nmt_study.design import CLAIM_RUNS
from nmt_study.sources import missing
from nmt_study.variants import FAMILIES, LAB_CLAIM_VARIANTS, VARIANTS


def test_every_generated_table_matches_the_committed_results():
    for document in published.DOCUMENTS:
        text = (ROOT / document).read_text(encoding="utf-8")
        found = tables.blocks(text)
        assert found, f"{document} has no generated table"
        opened = text.count("<!-- results:")  # a marker the pattern misses would never be rendered, nor checked
        assert len(found) == opened == text.count("<!-- /results:"), f"{document}: a results marker is malformed"
        for name, body in found:
            assert body == tables.render(name), (
                f"{document}: the table results:{name} differs from what results/*.json gives; run "
                "`python -m nmt_study results --render` (make results-tables) and commit both"
            )
    assert {name for name, _ in tables.blocks((ROOT / "README.md").read_text())} >= {"main_short", "claims_short"}


def test_the_tuning_guides_trials_match_the_committed_tuning_records():
    """docs/tuning.md's trials block is rendered from results/runs/tune as the queue records them (a record
    committed without it left the guide behind its records)."""
    from nmt_study.cli import tune as tune_cli

    text = tune_cli.DOCUMENT.read_text(encoding="utf-8")
    assert tune_cli.rendered_report(text) == text, (
        "docs/tuning.md's trials differ from results/runs/tune: run `python -m nmt_study tune --report` (or `make "
        "queue-record` for the queue's records) and commit both"
    )


def test_the_readme_reads_in_a_few_minutes():
    """Its generated tables included; detail belongs in docs/, which it links."""
    size = len((ROOT / "README.md").read_text(encoding="utf-8"))
    assert size <= 10_000, f"README.md has {size:,} characters, more than 10,000: move detail to docs/"


def record(variants: dict[str, list[float]]) -> dict:
    """A compare.json of made-up runs: {name: each seed's test BLEU}."""
    runs = {
        name: [
            {
                "seed": 1234 + k,
                "valid_bleu": b - 1,
                "test_bleu": b - 0.5,
                "test_bleu_beam": b,
                "test_chrf": b + 20,
                "updates": 100,
                "parameters": 1000,
                "budget": "1e+14 FLOPs",
                "compute_curve": [[0.1, 2.5, b - 1]],
                "petaflops": 0.1,
                "config": {
                    "trainer": {"patience": 5, "max_flops": 1e14},
                    "model": {"_target_": f"nmt.models.x.{name.split()[0].capitalize()}"},  # its family
                },
                "provenance": {
                    "commits": ["abcdef1234"],
                    "dates": ["2026-11-24T10:00:00"],
                    "finished": "2026-11-24T11:30:00",
                    "machines": ["a CPU (fp32)"],
                },
            }
            for k, b in enumerate(bleus)
        ]
        for name, bleus in variants.items()
    }
    return {
        "command": "python -m nmt_study compare x",
        "torch": "2.13.0",
        "signatures": {"BLEU": "nrefs:1|tok:13a"},
        "power": "Test BLEU moves by 1.00 from one seed to the next.",
        "best": "bahdanau (additive)",
        "variants": {
            n: {"mean_valid_bleu": sum(b) / len(b) - 1, "runs": r} for (n, b), r in zip(variants.items(), runs.values())
        },
        "intervals": {
            "baseline": {"bahdanau (additive)": {"BLEU": {"delta": 10.0, "low": 9.0, "high": 11.0, "p": 0.0002}}}
        },
        "claims": [
            {
                "claim": "Attention beats the fixed-vector encoder-decoder",
                "source": "Bahdanau",
                "verdict": "supported",
                "evidence": "+10.00 BLEU",
            }
        ],
    }


def test_tables_render_from_the_json_and_say_where_the_runs_come_from(tmp_path):
    made = record({"sutskever": [10.0, 12.0, 11.0], "bahdanau (additive)": [30.0, 31.0, 32.0]})
    made["intervals"]["best"] = {
        "sutskever": {"BLEU": {"delta": -20.0, "low": -21.0, "high": -19.0, "p": 0.0002, "seeds": 3}}
    }
    made["claims"].append(
        {
            "claim": "Input feeding helps",
            "source": "Luong",
            "verdict": "not measured",
            "evidence": "needs two Luong variants that differ only in input feeding",
        }
    )
    (tmp_path / "main.json").write_text(json.dumps(made))
    (tmp_path / "compare.json").write_text(json.dumps(made))
    (tmp_path / "claims.json").write_text(json.dumps(made))
    main = tables.main_table(tmp_path)
    rows = [line for line in main.splitlines() if line.startswith("| ") and "seeds" not in line]
    assert rows[0].startswith(
        "| bahdanau (additive) | hand-set defaults, 3 of 3 capped | 3 | 1,000 | 30.00 ± 1.00 | 30.50 ± 1.00 | "
        "31.00 ± 1.00 |"
    )
    assert "at commit abcdef1 on a CPU (fp32), analysed with torch 2.13.0" in main
    assert "trained 2026-11-24 10:00 to 2026-11-24 11:30 UTC" in main  # from the first start to the last end
    made["variants"]["sutskever"]["runs"][0]["provenance"]["machines"] = ["a CPU(R) 2"]  # before precisions were kept
    (tmp_path / "main.json").write_text(json.dumps(made))
    assert "on a CPU (fp32); a CPU(R) 2 (precision not recorded), analysed with torch" in tables.main_table(tmp_path)
    assert "Seeds pooled across machine kinds, CPU kernels or precisions: sutskever (a CPU (fp32); a CPU(R) 2)" in (
        tables.main_table(tmp_path)
    )
    bahdanau = made["variants"]["bahdanau (additive)"]["runs"]
    for run, kernels in zip(bahdanau, (["AVX512"], ["AVX2"], [])):  # one CPU's name, two kinds of vector kernels
        run["provenance"]["kernels"] = kernels
    (tmp_path / "main.json").write_text(json.dumps(made))
    main = tables.main_table(tmp_path)
    assert "(precision not recorded), ATen AVX2, AVX512 (where recorded), analysed" in main  # the runs' kernels
    assert "bahdanau (additive) (a CPU (fp32); ATen AVX2; ATen AVX512)" in main  # their seeds were pooled: said
    bahdanau[1]["provenance"]["kernels"] = ["AVX512"]
    (tmp_path / "main.json").write_text(json.dumps(made))
    assert "bahdanau (additive) (" not in tables.main_table(tmp_path)  # one kind, or not recorded: not flagged
    assert "| 2.5 ± 0.0 | 100 | 0.10 ± 0.00 |" in rows[0]
    assert "1e+14 FLOPs each, or less where valid BLEU stalled for 5 validations" in main
    assert rows[0].split(" | ")[8] == "-" and "| -20.00 [-21.00, -19.00] 0.0002 | 2.5" in rows[1]  # Δ the best
    assert "minus that of the best on valid (bahdanau (additive))" in main
    assert "Input feeding helps | Luong | **not measured**" in claims_table(tmp_path)
    made["intervals"]["best"]["sutskever"]["BLEU"]["seeds"] = 1  # under 3 seeds: the sentences' variance alone
    (tmp_path / "main.json").write_text(json.dumps(made))
    assert "| -20.00 [-21.00, -19.00] 0.0002, 1 seed | 2.5" in tables.main_table(tmp_path)
    compare = tables.compare_table(tmp_path)
    assert "| +10.00 [+9.00, +11.00] 0.0002 |" in compare and "Best on valid: bahdanau (additive)" in compare
    claims = claims_table(tmp_path)
    assert "| **supported** | +10.00 BLEU | - | - |" in claims and claims.count("Test BLEU moves by 1.00") == 1
    assert "| **supported** | +10.00 BLEU | - | - |" in tables.render("claims_short", tmp_path)  # as is
    interval = {"delta": 2.0, "low": 1.0, "high": 3.0}
    two = {"claim": "c", "comparisons": [interval, {**interval, "delta": -1.0, "low": -2.5}]}
    assert brief(two) == "2 comparisons, BLEU: +2.00 [+1.00, +3.00], -1.00 [-2.50, +3.00]"
    three = {**two, "comparisons": [*two["comparisons"], {"delta": 4.0, "low": 3.5, "high": 4.5}]}
    assert brief(three) == "3 comparisons, BLEU: -1.00 to +4.00, their 95% intervals within [-2.50, +4.50]"
    above = {**three, "comparisons": [c | {"low": c["delta"] - 0.5} for c in three["comparisons"][::2]] * 2}
    assert brief(above).endswith("+2.00 to +4.00, every 95% interval above 0 (the lowest bound +1.50)")
    below = {**three, "comparisons": [{"delta": -d, "low": -d - 1, "high": -d + 0.5} for d in (2.0, 3.0, 4.0)]}
    assert brief(below).endswith("-4.00 to -2.00, every 95% interval below 0 (the highest bound -1.50)")
    assert "Not run yet: `make results` writes results/lab.json" in tables.lab_table(tmp_path)


def test_marked_blocks_are_rewritten_in_place_and_nothing_else(tmp_path):
    (tmp_path / "main.json").write_text(json.dumps(record({"sutskever": [10.0]})))
    document = tmp_path / "README.md"
    document.write_text("intro\n<!-- results:main -->\nold table\n<!-- /results:main -->\nafter\n")
    assert tables.update_file(document, tmp_path)
    text = document.read_text()
    assert text.startswith("intro\n<!-- results:main -->\n| model |") and text.endswith(
        "<!-- /results:main -->\nafter\n"
    )
    assert "old table" not in text and "| sutskever | hand-set defaults, 1 of 1 capped | 1 |" in text
    assert not tables.update_file(document, tmp_path)  # rendered twice: the same
    with pytest.raises(UserError, match="results:nosuch: no such table"):
        tables.rendered("<!-- results:nosuch -->\n<!-- /results:nosuch -->", tmp_path)


def test_a_measurement_is_saved_with_where_and_when_and_rendered_as_its_table(tmp_path):
    assert "Not measured yet: `python -m nmt_study measure decode_memory --record`" in tables.render(
        "decode_memory", tmp_path
    )
    path = published.record_measurement(
        "decode_memory", ["model", "greedy"], [["bahdanau", "327 MiB, 1.0 s"]], "One line.", folder=tmp_path
    )
    saved = json.loads(path.read_text())
    assert saved["rows"] == [["bahdanau", "327 MiB, 1.0 s"]] and saved["command"].startswith("python ")
    assert set(saved) >= {"commit", "uncommitted_changes", "date", "machine", "threads", "torch"}
    table = tables.render("decode_memory", tmp_path)
    assert table.startswith("| model | greedy |\n|---|---|\n| bahdanau | 327 MiB, 1.0 s |\n\nOne line. `python ")
    assert f"at commit {(saved['commit'] or 'not recorded')[:7]}" in table and "UTC" in table
    with pytest.raises(ValueError, match="not a measurement"):
        published.record_measurement("speed_of_light", ["a"], [["b"]], folder=tmp_path)
    # the command as typed, not the path Python gives `python -m nmt_study`
    main = str(Path(published.__file__).parent / "__main__.py")
    assert published.invoked([main, "measure", "speed", "--record"]) == [
        "-m",
        "nmt_study",
        "measure",
        "speed",
        "--record",
    ]


def test_our_speed_beside_joey_nmts_is_rendered_with_the_ratio_and_where_each_comes_from(tmp_path):
    assert tables.render("versus_joeynmt", tmp_path).startswith("Not measured yet: `python -m nmt_study measure")
    ours = {
        "bahdanau": {"train_tokens_per_second": 2000.0, "peak_rss_gib": 2.0},
        "transformer": {"train_tokens_per_second": 2700.0, "decode_beam1_sentences_per_second": 200.0},
    }
    theirs = {
        "rnn": {"train_tokens_per_second": 625.0, "peak_rss_gib": 2.5},
        "transformer": {"train_tokens_per_second": 540.0, "decode_beam1_sentences_per_second": 25.0},
    }
    published.record_measurement("benchmark", ["model"], [["bahdanau"]], "Ours, bf16.", tmp_path, values=ours)
    assert "Not measured yet: `python -m nmt_study measure joeynmt" in tables.render("versus_joeynmt", tmp_path)
    published.record_measurement("joeynmt", ["model"], [["rnn"]], "Joey, fp32.", tmp_path, values=theirs)
    table = tables.render("versus_joeynmt", tmp_path)
    assert "| bahdanau / Joey's rnn, train target tok/s | 2,000 | 625 | 3.20x |" in table
    assert "| bahdanau / Joey's rnn, peak RSS while training | 2.00 GiB | 2.50 GiB | 0.80x |" in table
    assert "| transformer / Joey's transformer, decoding test2016 greedy, sent/s | 200.0 | 25.0 | 8.00x |" in table
    assert "beam 5" not in table  # a figure measured on one side only is left out, not guessed
    assert "Ours: Ours, bf16. `python " in table and "Joey NMT: Joey, fp32. `python " in table


def test_the_lab_is_rendered_from_its_json_as_the_lab_writes_its_report(tmp_path):
    alignment = {"aer": 0.08, "precision": 0.91, "recall": 0.92, "entropy": 0.8, "diagonality": 0.9, "support": 12.5}
    local_m = "luong (general, local_m, no feeding, bidirectional)"
    lab = {
        "command": "python -m nmt_study lab --seeds 3",
        "train_words": 20,
        "commits": ["abc1234"],
        "results": [
            {
                "name": "bahdanau, sparsemax",
                "seeds": [{}, {}, {}],
                "test_bleu": 99.0,
                "alignment_map": "alignment",
                "by_length": {},
                "test_alignment": alignment,
                "long_alignment": alignment,
            },
            {
                "name": "sutskever",
                "seeds": [{}, {}, {}],
                "test_bleu": 75.0,
                "by_length": {"1-10": {"bleu": 97.9, "sentences": 100}},
            },
            {
                "name": local_m,
                "variant": {"family": "luong", "score": "general", "alignment": "local_m"},  # its key: the paper's AER
                "seeds": [{}, {}, {}],
                "test_bleu": 98.2,
                "alignment_map": "alignment",
                "by_length": {"1-10": {"bleu": 99.8, "sentences": 100}, "61-80": {"bleu": 73.7, "sentences": 100}},
                "test_alignment": {**alignment, "aer_sd": 0.006},
                "long_alignment": {**alignment, "aer": 0.2},
            },
        ],
        "claims": [
            {
                "claim": "Local attention aligns better than global (lower AER)",
                "source": "Luong et al. 2015",
                "verdict": "inconclusive",
                "evidence": "AER -0.01",
            }
        ],
    }
    (tmp_path / "lab.json").write_text(json.dumps(lab))
    table = tables.render("lab", tmp_path)
    assert table.startswith("Mean over 3 seeds (AER ± its standard deviation over seeds):")
    assert (
        f"| {local_m} | alignment | 0.080 ± 0.006 | 0.910 | 0.920 | 0.200 | 12.5 | 0.80 | 0.90 | 0.34 | 98.20 |"
        in table
    )  # the paper's AER for local-m beside ours
    assert table.index(local_m) < table.index("| sutskever | no attention |")  # ranked by AER, no attention last
    assert (
        "| model: test BLEU by source words (sentences) | 1-10 (100) | 11-20 (0) |" in table
        and f"| {local_m} | 99.8 | - | - | - | - | 73.7 |" in table
    )
    assert "at most 20 words" in table and "| Local attention aligns better than global (lower AER) |" in table
    assert table.rstrip().endswith("`python -m nmt_study lab --seeds 3`; commits abc1234.")
    family = tables.render("lab_family", tmp_path)  # docs/attention.md's: Bahdanau's and the Transformer's variants
    assert "sutskever" not in family and local_m not in family and family.rstrip().endswith("commits abc1234.")
    provenance = {
        "commits": ["abc1234ff+changes"],
        "dates": ["2026-11-25T17:33:34"],
        "machines": ["a CPU (fp32)"],
        "finished": "2026-11-25T17:37:31",
    }
    for result in lab["results"]:  # the lab.json of today's make results keeps each run's provenance
        result["seeds"] = [{"provenance": {**provenance, "finished": f"2026-11-2{5 + k}T1{k}:00"}} for k in range(3)]
    (tmp_path / "lab.json").write_text(json.dumps({**lab, "torch": "2.13.0"}))
    line = "9 runs, `python -m nmt_study lab --seeds 3`, trained 2026-11-25 10:00 to 2026-11-27 12:00 UTC at commit "
    assert (
        tables.render("lab", tmp_path)
        .rstrip()
        .endswith(f"{line}abc1234+changes on a CPU (fp32), analysed with torch 2.13.0.")
    )
    # the torch that trained the runs, where they recorded it (a GPU's may not be the one that analyses them)
    lab["results"][0]["seeds"][0]["provenance"]["torch"] = ["2.11.0+cu130"]
    (tmp_path / "lab.json").write_text(json.dumps({**lab, "torch": "2.13.0"}))
    rendered = tables.render("lab", tmp_path).rstrip()
    assert rendered.endswith(
        "on a CPU (fp32) with torch 2.11.0+cu130 (not recorded by some), analysed with torch 2.13.0."
    )


def test_the_parts_table_says_which_parts_of_make_results_are_complete(tmp_path):
    runs = tmp_path / "runs"
    for variant, seeds in (("sutskever", (1234, 1235, 1236)), ("bahdanau", (1234, 1235)), ("luong_dot", (1234,))):
        for seed in seeds:
            (runs / variant / f"seed{seed}").mkdir(parents=True)
            (runs / variant / f"seed{seed}" / "results.json").write_text("{}")
    (runs / "luong" / "seed1234").mkdir(parents=True)  # unfinished: no results.json
    finished = published.finished(runs)
    assert finished == {"bahdanau": [1234, 1235], "luong_dot": [1234], "sutskever": [1234, 1235, 1236]}
    claims = "| claims | luong_feeding, beside main's runs |"
    others = "| others | the comparison: 17 variants at 1e14 FLOPs "
    assert f"{claims} no runs yet |" in tables.render("parts", tmp_path)
    (tmp_path / "compare.json").write_text(json.dumps({"finished": finished}))
    table = tables.render("parts", tmp_path)
    assert f"{others}(early training) | 6 of 51 runs |" in table and f"{claims} no runs yet |" in table
    main = "| main | transformer tuned and converged; the other 3 families' 5e14 runs |"
    assert f"{main} no runs yet |" in table
    (tmp_path / "main.json").write_text(json.dumps({"finished": {"bahdanau": [1234], "transformer": [1234, 1235]}}))
    assert f"{main} 2 of 5 runs |" in tables.render("parts", tmp_path)  # the design's 5 seeds of its own arm
    assert not published.complete({"bahdanau": [1234], "luong": [1234, 1235]}, FAMILIES)
    assert published.complete({family: [1, 2, 3] for family in FAMILIES}, FAMILIES)
    every = {variant: [1234, 1235, 1236, 1237, 1238, 1239] for variant in CLAIM_RUNS}  # a 6th seed counts as 5
    (tmp_path / "claims.json").write_text(json.dumps({"finished": every}))
    assert f"{claims} **complete**: 5 runs |" in tables.render("parts", tmp_path)
    (tmp_path / "claims.json").unlink()  # runs recorded while the part goes on count before its report is made
    for seed in (1234, 1235):
        (runs / "claims" / "luong_feeding").mkdir(parents=True, exist_ok=True)
        (runs / "claims" / "luong_feeding" / f"seed{seed}.record.json").write_text("{}")
    assert f"{claims} 2 of 5 runs |" in tables.render("parts", tmp_path)
    # tables from the earlier protocol's report (5e14 FLOPs), kept apart until today's report is made
    earlier = {"config": {"trainer": {"max_flops": 5e14, "patience": 5, "validations": 0}}, "budget": "5e+14 FLOPs"}
    (tmp_path / "claims_5e14.json").write_text(json.dumps({"variants": {"x": {"runs": [earlier] * 24}}}))
    assert f"{claims} 2 of 5 runs under today's protocol; tables: 24 earlier runs at 5e+14 FLOPs |" in tables.render(
        "parts", tmp_path
    )
    (tmp_path / "claims.json").write_text(json.dumps({"finished": {"luong_feeding": [1234, 1235]}}))
    assert f"{claims} 2 of 5 runs |" in tables.render("parts", tmp_path)  # today's report: its tables
    (tmp_path / "claims.json").unlink()
    lab = "| lab | the attention variants on the sample grammar |"
    assert f"{lab} no runs yet; its table is written when all its runs end |" in tables.render("parts", tmp_path)
    for variant, seed in (("lab_bahdanau", 1234), ("lab_bahdanau", 1235), ("lab_sutskever", 1234)):
        (runs / "lab" / variant).mkdir(parents=True, exist_ok=True)
        (runs / "lab" / variant / f"seed{seed}.record.json").write_text("{}")  # the lab's records so far
    assert f"{lab} 3 of 81 runs; its table is written when all its runs end |" in tables.render("parts", tmp_path)
    words = parts.lab_train_words()  # a lab.json of today's protocol
    one_seed = {"results": [{"seeds": [{}]}, {"seeds": [{}]}], "train_words": words}
    (tmp_path / "lab.json").write_text(json.dumps(one_seed))
    shown = "3 of 81 runs; its tables show the 1 seed every variant has so far |"
    assert f"{lab} {shown}" in tables.render("parts", tmp_path)

    for variant in VARIANTS:
        (runs / "lab" / f"lab_{variant}").mkdir(parents=True, exist_ok=True)
        for seed in (1234, 1235, 1236):
            (runs / "lab" / f"lab_{variant}" / f"seed{seed}.record.json").write_text("{}")
    assert f"{lab} 51 of 81 runs; its tables show the 1 seed" in tables.render("parts", tmp_path)
    for variant in LAB_CLAIM_VARIANTS:  # 8 seeds of the variants the lab's claims compare
        for seed in range(1237, 1242):
            (runs / "lab" / f"lab_{variant}" / f"seed{seed}.record.json").write_text("{}")
    assert f"{lab} **complete**: 81 runs; its tables show the 1 seed" in tables.render("parts", tmp_path)
    three = {"seeds": [{}] * 3}
    (tmp_path / "lab.json").write_text(json.dumps({"results": [three], "train_words": words}))
    assert f"{lab} **complete**: 81 runs; its tables show the 3 seeds" in tables.render("parts", tmp_path)
    (tmp_path / "lab.json").write_text(json.dumps({"results": [three, {"seeds": [{}] * 8}], "train_words": words}))
    assert f"{lab} **complete**: 81 runs |" in tables.render("parts", tmp_path)
    # a lab.json of an earlier protocol (trained on shorter sentences) is named so, beside today's records
    (tmp_path / "lab.json").write_text(json.dumps({"results": [{"seeds": [{}, {}]}] * 3, "train_words": 20}))
    for variant in VARIANTS[1:]:
        for path in (runs / "lab" / f"lab_{variant}").glob("seed*.record.json"):
            path.unlink()
    # bahdanau's 8 seeds (one of the variants the lab's claims compare) count, beside today's protocol's earlier tables
    stale = "8 of 81 runs of today's protocol; its tables are still the earlier one's (trained on at most 20 words, 6"
    assert f"{lab} {stale} runs) |" in tables.render("parts", tmp_path)


def test_readme_shows_the_main_runs_figures_once_made_and_the_comparisons_until_then(tmp_path):
    figures, report = tmp_path / "figures", tmp_path / "report"
    assert tables.figures_block(tmp_path, figures).startswith("The figures (valid BLEU against compute")
    report.mkdir()
    for name in ("bleu_by_compute.png", "attention.png", "bleu_by_time.png"):
        (report / name).write_bytes(b"png")
    published.copy_figures(report, "compare", figures)
    assert sorted(p.name for p in figures.iterdir()) == ["compare_attention.png", "compare_bleu_by_compute.png"]
    block = tables.figures_block(tmp_path, figures)
    assert "![valid BLEU against training compute](docs/figures/results/compare_bleu_by_compute.png)" in block
    assert "From the comparison's runs" in block and "bleu_by_length" not in block  # only what was made
    published.copy_figures(report, "main", figures)
    assert "docs/figures/results/main_attention.png" in tables.figures_block(tmp_path, figures)
    assert "compare_" not in tables.figures_block(tmp_path, figures)


def test_the_lab_tests_each_variant_against_the_one_it_changes_and_the_tables_show_it(tmp_path):
    """AER differences from link counts over seeds: a variant whose links miss in every seed is higher, one that
    matches its baseline is inconclusive, a pair without counts is left out; Holm over the lab's differences; the
    family table of docs/attention.md keeps Bahdanau's and the Transformer's rows."""
    import numpy as np

    from nmt_study.lab_plan import contrasts, contrasts_table
    from nmt_study.significance import Evidence

    names = {
        "bahdanau": "bahdanau (additive)",
        "bahdanau_gumbel": "bahdanau (additive, hard gumbel)",
        "bahdanau_entmax15": "bahdanau (additive, entmax15)",
        "luong": "luong (general, global)",
        "luong_dot": "luong (dot, global)",
    }
    rng = np.random.default_rng(0)

    def counts(hits: float) -> dict[int, np.ndarray]:  # sure hits, possible hits, links found, sure links
        return {seed: np.array([[h, h, 10, 10] for h in rng.binomial(10, hits, 60)]) for seed in (1, 2, 3)}

    alignments = {
        names["bahdanau"]: counts(0.9),
        names["bahdanau_gumbel"]: counts(0.6),
        names["bahdanau_entmax15"]: counts(0.9),
        names["luong"]: counts(0.9),
    }
    found = contrasts(Evidence({}, [""] * 60, alignments=alignments, resamples=1000), names)  # none for luong_dot
    pairs = [(names["bahdanau_entmax15"], names["bahdanau"]), (names["bahdanau_gumbel"], names["bahdanau"])]
    assert [(c["variant"], c["baseline"]) for c in found] == pairs
    entmax, gumbel = found
    assert gumbel["delta"] == pytest.approx(0.3, abs=0.05) and gumbel["low"] > 0 and gumbel["p_holm"] < 0.05
    assert entmax["low"] < 0 < entmax["high"] and entmax["p_holm"] >= entmax["p"]
    rows = contrasts_table(found)
    assert rows[2].endswith("3 seeds) | inconclusive |") and rows[3].endswith("3 seeds) | **higher AER** |")
    two_seeds = [{**c, "seeds": 2} for c in found]  # under 3 seeds: figures, no verdict
    assert contrasts_table(two_seeds)[3].endswith("| needs 3 seeds |")
    alignment = {"aer": 0.1, "precision": 0.9, "recall": 0.9, "entropy": 0.8, "diagonality": 0.9, "support": 12.5}
    lab = {
        "command": "python -m nmt_study lab --seeds 3",
        "train_words": 20,
        "commits": ["abc1234"],
        "claims": [],
        "results": [
            {
                "name": n,
                "seeds": [{}, {}, {}],
                "test_bleu": 99.0,
                "alignment_map": "alignment",
                "by_length": {},
                "test_alignment": alignment,
                "long_alignment": alignment,
            }
            for n in names.values()
        ],
        "contrasts": [*found, {**entmax, "variant": names["luong_dot"], "baseline": names["luong"]}],
    }
    (tmp_path / "lab.json").write_text(json.dumps(lab))
    table, family = tables.render("lab", tmp_path), tables.render("lab_family", tmp_path)
    line = "Each variant's test AER minus that of the variant it changes"
    assert line in table and f"| {names['luong_dot']} | {names['luong']} |" in table
    assert line in family and f"| {names['bahdanau_gumbel']} | {names['bahdanau']} |" in family
    assert names["luong_dot"] not in family
    del lab["contrasts"]  # a lab.json from before the differences: no table of them
    (tmp_path / "lab.json").write_text(json.dumps(lab))
    assert line not in tables.render("lab", tmp_path)


def test_the_claims_table_takes_from_the_lab_only_what_the_comparison_could_not_measure(tmp_path):
    made = record({"sutskever": [10.0, 12.0, 11.0], "bahdanau (additive)": [30.0, 31.0, 32.0]})
    aligns = "Local attention aligns better than global (lower AER)"
    made["claims"] += [
        {"claim": aligns, "source": "Luong", "verdict": "not measured", "evidence": "needs gold links"},
        {
            "claim": "The gap grows with sentence length",
            "source": "Bahdanau",
            "verdict": "inconclusive",
            "evidence": "Multi30k's",
        },
    ]
    (tmp_path / "claims.json").write_text(json.dumps(made))
    comparison = {"delta": 0.06, "low": 0.02, "high": 0.10}
    lab_claims = [
        {
            "claim": aligns,
            "source": "Luong et al. 2015, Table 6",
            "verdict": "contradicted",
            "evidence": "local_p minus global: +0.06 AER",
            "comparisons": [comparison],
        },
        {
            "claim": "The gap grows with sentence length",
            "source": "Bahdanau",
            "verdict": "supported",
            "evidence": "the lab's",
            "comparisons": [],
        },
    ]
    provenance = {"commits": ["abc1234"], "dates": ["2026-11-25T17:33:34"], "machines": ["a CPU (fp32)"]}
    lab = {
        "command": "python -m nmt_study lab --seeds 3",
        "results": [{"seeds": [{"provenance": provenance}] * 3}],
        "claims": [{**lab_claims[0], "verdict": "needs 3 seeds"}, lab_claims[1]],
    }
    (tmp_path / "lab.json").write_text(json.dumps(lab))
    # the lab measured it, on fewer seeds than a verdict needs: so it says, with the lab's figures
    needs = f"| {aligns} | Luong et al. 2015, Table 6 | **needs 3 seeds** | local_p minus global: +0.06 AER |"
    assert needs in claims_table(tmp_path)
    not_yet = {**lab, "claims": [{**lab_claims[0], "verdict": "not measured"}, lab_claims[1]]}
    (tmp_path / "lab.json").write_text(json.dumps(not_yet))
    assert f"| {aligns} | Luong | **not measured** |" in claims_table(tmp_path)  # nor has the lab
    (tmp_path / "lab.json").write_text(json.dumps({**lab, "claims": lab_claims}))
    table = claims_table(tmp_path)
    assert f"| {aligns} | Luong et al. 2015, Table 6 | **contradicted** | local_p minus global: +0.06 AER |" in table
    assert "| The gap grows with sentence length | Bahdanau | **inconclusive** | Multi30k's |" in table  # measured
    earlier = "The lab's claims: its 3 runs of the earlier protocol (at most 20 words; `results/lab.json`), trained"
    assert f"{earlier} 2026-11-25 17:33" in table  # a lab.json without train_words: the 20-word protocol of before
    short = tables.render("claims_short", tmp_path)
    assert "| **contradicted** | the lab: 1 comparison, AER: +0.06 [+0.02, +0.10] |" in short
    assert "the lab's claims, its 3 runs of the earlier protocol (" in short
    today = {**lab, "claims": lab_claims, "train_words": parts.lab_train_words()}
    (tmp_path / "lab.json").write_text(json.dumps(today))
    assert "The lab's claims: its 3 runs (`results/lab.json`), trained 2026" in claims_table(tmp_path)
    assert "the lab's claims, its 3 runs (" in tables.render("claims_short", tmp_path)


def test_the_claims_table_takes_from_the_earlier_runs_only_what_the_converged_ones_do_not_test(tmp_path):
    """One label per claim: the converged report's (the claims' own runs and the main table's), the 5e14 report's
    where the converged runs lack the variants, with how the primary comparison's arms stopped."""
    feeding, transformer = "Input feeding helps", "The Transformer beats the recurrent models"
    earlier = record({"luong": [30.0, 31.0, 32.0], "luong_fed": [30.5, 31.0, 31.5], "transformer": [31, 32, 33]})
    earlier["claims"] = [
        {"claim": c, "source": "paper", "verdict": v, "evidence": f"5e14: {v}", "arms": arms}
        for c, v, arms in [
            ("Attention beats the fixed-vector encoder-decoder", "supported", ["transformer", "luong"]),
            (feeding, "still improving", ["luong_fed", "luong"]),
            (transformer, "inconclusive", ["transformer", "luong"]),
        ]
    ]
    (tmp_path / "claims_5e14.json").write_text(json.dumps(earlier))
    table = claims_table(tmp_path)  # no converged runs yet: every row the earlier report's, said once below
    assert f"| {transformer} | paper | **inconclusive** | 5e14: inconclusive | - | cap 3 / cap 3 |" in table
    assert "*5e14 runs*" not in table and table.count("Test BLEU moves by 1.00") == 1
    assert tables.main_table(tmp_path) == missing("main")  # nor an earlier main table
    (tmp_path / "main_5e14.json").write_text(json.dumps(earlier))
    assert "| luong | 5e14 FLOPs, hand-set defaults | 3 |" in tables.main_table(
        tmp_path
    )  # the earlier main table until today's exists
    today = record({"luong": [33.0, 34.0, 35.0], "luong_fed": [34.0, 35.0, 36.0], "transformer": [35, 36, 37]})
    for run in today["variants"]["transformer"]["runs"]:  # stopped by patience: 2 validations past the best
        run |= {"best_step": 10, "curve": [[0, 10, 30.0], [0, 11, 29.0], [0, 12, 29.5]], "petaflops": 0.05}
        run["config"]["trainer"] |= {"patience": 2}
    today["claims"] = [
        {"claim": "Attention beats the fixed-vector encoder-decoder", "source": "paper", "verdict": "not measured",
         "evidence": "needs bahdanau_fixed"},
        {"claim": feeding, "source": "paper", "verdict": "supported", "evidence": "converged",
         "arms": ["luong_fed", "luong"]},
        {"claim": transformer, "source": "paper", "verdict": "supported", "evidence": "converged",
         "arms": ["transformer", "luong"]},
    ]  # fmt: skip
    today["power"] = "Converged: test BLEU moves by 0.50."
    (tmp_path / "claims.json").write_text(json.dumps(today))
    table = claims_table(tmp_path)
    assert f"| {transformer} | paper | **supported** | converged | - | patience 3 / cap 3 |" in table
    assert f"| {feeding} | paper | **supported** | converged |" in table and "still improving" not in table
    assert "| **supported** | *5e14 runs*: 5e14: supported | - | cap 3 / cap 3 |" in table  # not retested: kept
    assert "Converged: test BLEU moves by 0.50." in table and "The claims marked *5e14 runs*: 9 runs" in table
    short = tables.render("claims_short", tmp_path)
    assert "9 runs on a CPU (fp32); 9 runs at 5e14 FLOPs on a CPU (fp32)" in short
    today["claims"][0] = {**earlier["claims"][0], "evidence": "converged"}  # today's runs test them all: no 5e14
    (tmp_path / "claims.json").write_text(json.dumps(today))
    assert "5e14" not in claims_table(tmp_path) + tables.render("claims_short", tmp_path)


def test_the_main_table_shows_the_converged_rows_beside_the_earlier_rows_of_the_families_not_trained_again(tmp_path):
    """The design trains the Transformer again (tuned, to convergence); the other families keep their 5e14 rows,
    labelled with their budget and recipe ("not converged" where still improving), outside the differences."""
    earlier = record({"transformer": [31.0, 32, 33], "luong": [30.0, 31, 32], "sutskever": [20.0, 21, 22]})
    earlier["variants"]["sutskever"]["still_improving"] = True
    (tmp_path / "main_5e14.json").write_text(json.dumps(earlier))
    alone = tables.main_table(tmp_path)  # no converged runs yet: the earlier table, each row saying how it trained
    assert "| transformer | 5e14 FLOPs, hand-set defaults | 3 |" in alone
    assert "| sutskever | 5e14 FLOPs, hand-set defaults, not converged | 3 |" in alone
    today = record({"transformer": [35.0, 36, 37, 38, 39]})
    for run in today["variants"]["transformer"]["runs"]:  # stopped by patience: 2 validations past the best
        run |= {"best_step": 10, "curve": [[0, 10, 30.0], [0, 11, 29.0], [0, 12, 29.5]], "petaflops": 0.05}
        run["config"]["trainer"] |= {"patience": 2}
    (tmp_path / "main.json").write_text(json.dumps(today))
    table = tables.main_table(tmp_path)
    rows = [line.split(" | ")[:3] for line in table.splitlines() if line.startswith("| ") and "seeds" not in line]
    assert rows == [
        ["| transformer", "tuned, converged", "5"],
        ["| luong", "5e14 FLOPs, hand-set defaults", "3"],
        ["| sutskever", "5e14 FLOPs, hand-set defaults, not converged", "3"],
    ]
    earlier_rows = [line for line in table.splitlines() if "5e14 FLOPs, hand-set" in line]
    assert all(line.split(" | ")[8] == "-" for line in earlier_rows)  # no difference across protocols
    assert "Rows trained at 5e14 FLOPs with hand-set defaults: the earlier protocol's runs (9 runs at 5e14" in table
    assert "The earlier rows: 9 runs," in table and "The earlier rows" not in tables.main_table(tmp_path, short=True)
    today["variants"]["transformer"]["runs"][0] |= {"petaflops": 0.1}  # one run reached the cap (1e14 FLOPs)
    (tmp_path / "main.json").write_text(json.dumps(today))
    assert "| transformer | tuned, 1 of 5 capped | 5 |" in tables.main_table(tmp_path)


def test_the_lab_windows_choice_is_rendered_from_its_runs_records_in_order_of_window(tmp_path):
    from nmt_study.records import validation_at

    run = tmp_path / "run"
    run.mkdir()
    lines = [{"step": 5, "loss": 0.9, "bleu": 10.0}, {"step": 9, "loss": 0.5, "bleu": 1}]
    lines += [{"step": 9, "loss": 0.4, "aer": 0.25, "bleu": 2}]
    (run / "validations.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n{cut sho")
    assert validation_at(run, 9) == {
        "loss": 0.4,
        "aer": 0.25,
        "bleu": 2,
    }  # a resumed run's repeated step: its last line
    assert validation_at(run, 7) == {} and validation_at(tmp_path, 9) == {}  # no such validation, no file
    assert "No runs of the window's choice" in tables.render("lab_window", tmp_path)
    provenance = {"commits": ["abc1234ff+changes"], "dates": ["2026-11-27T09:00:00"], "machines": ["a CPU (fp32)"]}

    def record(folder, alignment, window, best, score="General"):
        path = tmp_path / "runs" / folder / "seed7.record.json"
        path.parent.mkdir(parents=True)
        model = {
            "alignment": alignment,
            "window": window,
            "attention": {"_target_": f"nmt.models.attention.{score}Attention"},
        }
        body = {"seed": 7, "config": {"model": model}, "best_step": 90, "provenance": provenance}
        path.write_text(json.dumps({**body, "best_validation": best}))

    record("lab_window/D40/lab_luong_local_p", "local_p", 40, {"loss": 0.1133, "aer": 0.128, "bleu": 90.58})
    record("lab_window/D5/lab_luong_local_p", "local_p", 5, {"loss": 0.8, "bleu": 20.0})  # no AER measured
    table = tables.render("lab_window", tmp_path)
    five, forty = "| local-p, general | 5 | 0.800 | - | 20.0 | 90 |", "| local-p, general | 40 | 0.113 | 0.128 | 90.6 |"
    assert table.index(five) < table.index(forty)  # in order of the window, not of its folder's name
    assert "global" not in table and "seed 7, the lab's budget; 2 runs" in table and "abc1234+changes on" in table
    record("lab/lab_luong_local_m", "local_m", 40, {"loss": 0.107})  # today's lab's, beside the windows tried
    record("lab/lab_luong", "global", 40, {"loss": 0.102, "aer": 0.142, "bleu": 95.3})  # reads no window
    record("lab/lab_luong_location", "global", 40, {"loss": 0.171, "aer": 0.803}, "Location")
    rows = [line for line in tables.render("lab_window", tmp_path).splitlines() if line.startswith("| ")][1:]
    assert rows[2:] == [
        "| local-m, general | 40 (the lab's) | 0.107 | - | - | 90 |",
        "| global, general | - | 0.102 | 0.142 | 95.3 | 90 |",
        "| global, location | - | 0.171 | 0.803 | - | 90 |",
    ]


def test_the_still_improving_threshold_holds_on_the_recorded_noise():
    """IMPROVING_GAIN against the validation noise of the committed main and claims runs (valid BLEU about the line
    through each run's last third): flat curves with that noise, 3 seeds averaged, reach it less than 1% of the time;
    curves truly gaining twice as much are flagged over 95% of the time."""
    import numpy as np

    from nmt_study.claims import IMPROVING_GAIN, last_third_gain

    residuals, steps = [], None
    for path in sorted((ROOT / "results" / "runs").glob("[mc][al]*/*/*.record.json")):  # main/ and claims/
        curve = json.loads(path.read_text(encoding="utf-8"))["curve"]
        x, y = np.array([p[1] for p in curve], float), np.array([p[2] for p in curve], float)
        last = x >= x[-1] * 2 / 3
        if last.sum() >= 3:
            fit = np.polyval(np.polyfit(x[last], y[last], 1), x[last])
            residuals.extend(y[last] - fit)
            steps = x
    assert len(residuals) > 50 and steps is not None
    noise = float(np.std(residuals, ddof=1)) * 1.1  # a margin over the pooled estimate
    rng = np.random.default_rng(0)

    def flagged(gain_per_third: float) -> float:
        slope = gain_per_third / (steps[-1] / 3)
        means = [
            np.mean([last_third_gain([[0, s, 30 + slope * s + rng.normal(0, noise)] for s in steps]) for _ in range(3)])
            for _ in range(2000)
        ]
        return float(np.mean(np.array(means) >= IMPROVING_GAIN))

    assert flagged(0.0) < 0.01 and flagged(2 * IMPROVING_GAIN) > 0.95


def test_committed_records_name_their_corpus_by_checksum_and_rederive_here(monkeypatch):
    """No committed record holds a machine's folder; a main-table record, read on this checkout with the corpus
    wherever $NMT_DATA_DIR says, finds the test split it was scored on (its checksum) and gives its published BLEU
    again from its sentence statistics."""
    from conftest import MULTI30K

    from nmt_study import records
    from nmt_study.significance import corpus_score

    paths = sorted((ROOT / "results" / "runs").rglob("*.record.json"))
    assert paths
    for path in paths:
        data = json.loads(path.read_text(encoding="utf-8"))["config"]["data"]
        assert not set(records.MACHINE_KEYS) & data.keys() and data.get("test_sha256"), path
    if not (MULTI30K / "test_2016_flickr.de.gz").is_file():
        pytest.skip(f"no Multi30k at {MULTI30K} (set NMT_DATA_DIR)")
    monkeypatch.setenv("NMT_DATA_DIR", str(MULTI30K))
    path = ROOT / "results" / "runs" / "main_5e14" / "transformer" / "seed1234.record.json"
    record = records.load_record(path)
    pairs = records.test_pairs(record["config"]["data"], {}, path)
    assert len(pairs) == len(record["scored"]) == 1000
    totals = [sum(column) for column in zip(*record["scored"].statistics["BLEU"])]
    assert corpus_score("BLEU")(totals) == pytest.approx(record["test_bleu_beam"] or record["test_bleu"], abs=1e-9)
    changed = dict(record["config"]["data"], test_sha256="0" * 64)
    with pytest.raises(UserError, match="checksum"):
        records.test_pairs(changed, {}, path)


def test_the_main_tables_intervals_come_again_from_the_committed_records_on_this_checkout():
    """What `python -m nmt_study results --parts main --earlier` published (results/main_5e14.json), re-derived from
    the committed records alone, with the corpus wherever $NMT_DATA_DIR says: each family's mean test BLEU and its
    interval against the best on valid, over seeds and sentences, figure for figure, and the runs named as published
    (from the checkout's root, whichever checkout: records keep them so). The whole command, sacrebleu's per-seed
    tests included, takes about two minutes here; run in a copy of the tracked files, it gives results/main.json
    again with only the analysis's commit differing."""
    from conftest import MULTI30K

    from nmt_study import records
    from nmt_study.comparison import group, headline
    from nmt_study.significance import Evidence

    if not (MULTI30K / "test_2016_flickr.de.gz").is_file():
        pytest.skip(f"no Multi30k at {MULTI30K} (set NMT_DATA_DIR)")
    main = sorted((ROOT / "results" / "runs" / "main_5e14").glob("*/*.record.json"))
    runs = [records.load_record(path) for path in main]
    published = json.loads((ROOT / "results" / "main_5e14.json").read_text())
    pairs = records.test_pairs(runs[0]["config"]["data"], {}, main[0])
    groups = group(runs)
    scored = {name: {r["seed"]: r["scored"] for r in g} for name, g in groups.items()}
    evidence = Evidence(scored, [t for _, t in pairs], [len(s.split()) for s, _ in pairs], None, published["resamples"])
    best = published["best"]
    assert set(groups) == set(published["variants"]) and best in groups
    for name, runs_of in groups.items():
        variant = published["variants"][name]
        assert sum(headline(r) for r in runs_of) / len(runs_of) == pytest.approx(variant["mean_bleu"], abs=1e-9)
        assert [r["run"] for r in variant["runs"]] == [r["run"] for r in runs_of]
        if name != best:
            interval = vars(evidence.compare(name, best, "BLEU"))
            assert interval == pytest.approx(published["intervals"]["best"][name]["BLEU"]), name


def test_each_run_says_whether_its_cap_or_patience_stopped_it():
    def run(flops=5e14, patience=5, petaflops=0.5, best=10, validations=(5, 10)):
        trainer = {"max_flops": flops, "max_steps": 0, "patience": patience}
        curve = [(0.0, step, 30.0) for step in validations]
        figures = {"petaflops": petaflops, "updates": validations[-1], "best_step": best, "curve": curve}
        return {"config": {"trainer": trainer}} | figures

    assert stopped_by(run()) == "cap"  # the budget reached, learning or not
    assert stopped_by(run(petaflops=0.39, validations=(5, 10, 11, 12, 13, 14, 15))) == "patience"
    assert stopped_by(run(petaflops=0.39, validations=(5, 10, 11, 12))) == "other"  # 2 of 5 bad validations: by hand
    assert stops([run(), run(), run(petaflops=0.4, patience=1, validations=(10, 11))]) == "cap 2, patience 1"
    main = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert "| 0.39 ± 0.01 | patience 3 |" in main  # the Transformer stopped early; the RNNs trained their budget
    assert main.count("| 0.50 ± 0.00 | cap 3 |") == 3
