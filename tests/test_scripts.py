"""The report's arithmetic: scripts are loaded as modules, their pure parts tested without training anything."""

import importlib.util

from conftest import ROOT


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runs_that_differ_only_in_seed_get_mean_and_spread():
    compare = load_script("compare")
    runs = [
        {"name": "bahdanau (additive)", "valid_bleu": 30.0, "test_bleu": 31.0, "test_bleu_beam": 32.0},
        {"name": "bahdanau (additive)", "valid_bleu": 32.0, "test_bleu": 33.0, "test_bleu_beam": 34.0},
        {"name": "sutskever", "valid_bleu": 15.0, "test_bleu": 16.0, "test_bleu_beam": None},
    ]
    lines = compare.seed_summary(runs)
    rows = [line for line in lines if line.startswith("| bahdanau")]
    assert rows == ["| bahdanau (additive) | 2 | 31.00 ± 1.41 | 32.00 ± 1.41 | 33.00 ± 1.41 |"]
    assert not any(line.startswith("| sutskever") for line in lines)  # one run: no spread to show
    assert compare.seed_summary(runs[2:]) == []


def test_benchmark_table_reports_flops_against_the_measured_peak():
    benchmark = load_script("benchmark")
    result = {"model": "transformer", "parameters": 1_000_000, "train_tokens_per_second": 2000.0,
              "flops_per_token": 6e6, "model_flops_per_second": 12e9, "peak_rss_gib": 1.5,
              "decode_beam1_sentences_per_second": 100.0, "decode_beam5_sentences_per_second": 40.0}  # fmt: skip
    text = benchmark.table([result], peak=400e9, machine="test")
    assert "| transformer | 1,000,000 | 2,000 | 6 | 12 (3%) | 1.50 GiB | 100.0 | 40.0 |" in text


def test_benchmark_measures_and_profiles_a_small_model_on_the_sample_corpus(tmp_path, monkeypatch):
    benchmark = load_script("benchmark")
    monkeypatch.chdir(tmp_path)  # the sample vocabulary is cached under data/spm of the working folder
    spec = "sutskever data=sample model.embedding_size=16 model.hidden_size=24 data.max_tokens=256"
    args = benchmark.argparse.Namespace(threads=1, precision="fp32", device="cpu", data_dir=None, steps=2, windows=2,
                                        profile=2, train_only=True, output=str(tmp_path / "bench"))  # fmt: skip
    result = benchmark.measure(spec, args)
    assert result["train_tokens_per_second"] > 0 and len(result["train_windows"]) == 2
    # Counted products of a training step: at least the output layer's forward and two backward products per token.
    vocabulary = result["target_vocab_size"]
    assert result["flops_per_token"] > 3 * 2 * 24 * vocabulary
    profile = (tmp_path / "bench" / "profile_sutskever_data=sample_model.embedding_size=16_model.hidden_size=24_"
               "data.max_tokens=256.txt").read_text()  # fmt: skip
    assert "Self CPU" in profile and "aten::" in profile


def test_flop_count_includes_the_cpu_lstm_kernel():
    benchmark = load_script("benchmark")
    torch = benchmark.torch
    lstm = torch.nn.LSTM(64, 128, 2, batch_first=True)
    inputs = torch.randn(4, 10, 64)

    def step():
        with torch.autocast("cpu", torch.bfloat16):
            outputs, _ = lstm(inputs)
        outputs.float().sum().backward()

    forward = 2 * 40 * 512 * (64 + 128) + 2 * 40 * 512 * (128 + 128)  # two layers, 40 tokens, 4 gates of 128
    assert benchmark.counted_flops(step) == 3 * forward  # forward, and backward twice that


def test_the_lab_trains_scores_alignment_and_length_and_resumes_where_it_stopped(tmp_path, capsys):
    lab = load_script("lab")
    small = ["--variants", "sutskever,luong_local_m", "--steps", "6", "--minutes", "0", "--per-bucket", "2",
             "--output", str(tmp_path / "lab"), "--extra", "data.sizes.train=300", "data.sizes.valid=10",
             "data.sizes.test=10", "trainer.valid_every=3", "model.embedding_size=16", "model.hidden_size=24",
             f"data.spm_cache={tmp_path / 'spm'}"]  # fmt: skip
    lab.main(small)
    report = (tmp_path / "lab" / "report.md").read_text()
    assert "| luong (general, local_m) | alignment |" in report and "| 0.34 |" in report  # beside the paper's AER
    assert "| sutskever | no attention |" in report
    assert "| model | 1-10 (" in report and "61-80 (" in report
    for name in ("bleu_by_length.png", "valid_aer.png", "lab.json", "data/long.align"):
        assert (tmp_path / "lab" / name).is_file(), name
    results = lab.json.loads((tmp_path / "lab" / "lab.json").read_text())
    luong = next(r for r in results if r["name"].startswith("luong"))
    assert 0 <= luong["test_alignment"]["aer"] <= 1 and [step for step, _ in luong["valid_aer"]] == [3, 6]
    assert len(lab.read_gold(tmp_path / "lab" / "data" / "long.align")) == 12  # 2 per bucket
    capsys.readouterr()
    lab.main(small)  # a second run keeps the finished runs
    assert capsys.readouterr().out.count("done before, kept") == 2
