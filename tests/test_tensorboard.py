"""What a person sees in TensorBoard, read through TensorBoard's own HTTP data routes on a fresh demo run: the curves
first, in few named groups, no one-point cards, heatmaps, and an HParams table of the user's options."""

import json
import time
import urllib.parse
import urllib.request

import pytest
from helpers import run_python as run

from nmt.training.runlog import CURVES, METRICS


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A short demo run (tiny model, small splits, 4 validations) under outputs/<model>/<time>, and TensorBoard
    serving it."""
    from tensorboard import default, program

    outputs = tmp_path_factory.mktemp("outputs")
    run_dir = outputs / "bahdanau" / "2026-11-28_10-00-00"
    trained = run(
        "train.py", "experiment=demo", "size=tiny", "trainer.max_flops=0", "trainer.max_steps=20",
        "trainer.valid_every=5", "trainer.log_every=5", "trainer.progress=false", f"hydra.run.dir={run_dir}",
        "data.sizes.train=300", "data.sizes.valid=20", "data.sizes.test=20",
        f"data.spm_cache={outputs.parent / 'spm'}",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    board = program.TensorBoard(plugins=default.get_plugins())
    argv = [None, "--logdir", str(outputs), "--load_fast", "false", "--port", "0", "--host", "127.0.0.1"]
    board.configure(argv=[*argv, "--reload_interval", "0"])  # loaded once: no thread logs after the tests end
    url = board.launch()

    def get(route: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "X-XSRF-Protected": "1"}
        request = urllib.request.Request(url + route, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    for _ in range(300):  # the first load of the folder
        if get("data/runs"):
            break
        time.sleep(0.1)
    return get


def test_the_run_is_named_by_its_model_and_start_time(served):
    assert served("data/runs") == ["bahdanau/2026-11-28_10-00-00"]


def test_time_series_opens_on_the_curves_then_the_heatmaps_and_no_card_has_one_point(served):
    tags = served("data/plugin/timeseries/tags")
    scalars = set(tags["scalars"]["tagDescriptions"]) | set(
        tags["scalars"]["runTagInfo"]["bahdanau/2026-11-28_10-00-00"]
    )
    images = set(tags["images"]["tagRunSampledInfo"])
    groups = sorted({tag.split("/")[0] for tag in scalars | images})
    assert groups[:2] == ["curves", "heatmaps"] and set(groups) == {"curves", "heatmaps", "training", "validation"}
    curves = {tag for tag in scalars if tag.startswith("curves/")}
    assert curves == set(CURVES.values())  # the sample corpus has gold alignments: valid AER is a curve here
    assert not [tag for tag in scalars if tag.startswith(("hparam", "valid/", "compute/", "train/"))]
    assert images and all(tag.startswith("heatmaps/") for tag in images)
    for tag in scalars:
        query = urllib.parse.urlencode({"run": "bahdanau/2026-11-28_10-00-00", "tag": tag})
        points = served(f"data/plugin/scalars/scalars?{query}")
        assert len(points) >= 2, f"{tag}: a one-point card"
    for tag, runs in tags["images"]["tagRunSampledInfo"].items():
        assert runs["bahdanau/2026-11-28_10-00-00"]["maxSamplesPerStep"] == 1, tag
    query = urllib.parse.urlencode({"run": "bahdanau/2026-11-28_10-00-00", "tag": sorted(images)[0], "sample": 0})
    assert len(served(f"data/plugin/images/images?{query}")) >= 4  # the step slider shows attention forming


def test_hparams_lists_the_users_options_beside_the_curves_last_values(served):
    experiment = served("data/plugin/hparams/experiment", {"experimentName": ""})
    names = {info["name"] for info in experiment["hparamInfos"]}
    assert {"model", "model.attention", "model.hidden_size", "trainer.lr", "data.corpus", "seed"} <= names
    assert not [name for name in names if "_target_" in name or "_partial_" in name or name.startswith("hparam")]
    assert not names & {"trainer.progress", "trainer.log_every", "data.spm_cache", "trainer.num_plots"}
    assert [info["name"]["tag"] for info in experiment["metricInfos"]] == list(METRICS)
    groups = served("data/plugin/hparams/session_groups", {"experimentName": "", "allowedStatuses": ["STATUS_SUCCESS"],
                                                             "startIndex": 0, "sliceSize": 10})  # fmt: skip
    session = groups["sessionGroups"][0]
    assert session["hparams"]["model"] == "bahdanau" and session["hparams"]["model.attention"] == "additive"
    values = {value["name"]["tag"]: value["value"] for value in session["metricValues"]}
    assert set(values) == set(METRICS) and values["validation/best_bleu"] >= values["curves/valid_bleu"]


def test_text_shows_samples_as_a_table_and_the_results(served):
    tags = served("data/plugin/text/tags")["bahdanau/2026-11-28_10-00-00"]
    assert {tag.removesuffix("/text_summary") for tag in tags} == {"valid/samples", "valid/signature", "results"}

    def text(tag: str) -> str:
        query = urllib.parse.urlencode({"run": "bahdanau/2026-11-28_10-00-00", "tag": f"{tag}/text_summary"})
        return served(f"data/plugin/text/text?{query}")[-1]["text"]

    assert "<table>" in text("valid/samples") and "<table>" in text("results")
    assert "test/bleu" in text("results")


def test_the_hparams_table_opens_on_what_the_command_line_set():
    """TensorBoard's HParams table opened on settings the same in every run (issue 82): after the model, its
    attention and the seed come the options the command line set (what a sweep's runs differ in), then the rest."""
    from nmt.training.runlog import user_options

    config = {
        "model": {"_target_": "nmt.models.rnn.BahdanauSeq2Seq", "hidden_size": 8, "dropout": 0.1},
        "trainer": {"lr": 0.001, "label_smoothing": 0.1, "max_flops": 1e12},
        "seed": 3,
    }
    given = ("trainer.label_smoothing=0.2", "+model.dropout=0.3", "seed=3")
    keys = list(user_options(config, given=given))
    assert keys[:4] == ["model", "seed", "trainer.label_smoothing", "model.dropout"]
    assert set(keys[4:]) == {"model.hidden_size", "trainer.lr", "trainer.max_flops"}
