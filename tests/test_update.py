"""The one update (nmt/training/update.py) on the CPU: batches of a few static shapes, the loss and gradients they give
against the corpus's own batches, an update that reads nothing back and packs nothing, training that learns as eager
training does, the captured path (a recorder that replays on the CPU) bit-identical to the eager one for every family,
refusals by name, and optimiser states that move between captured and eager runs. The capture itself is
tests/test_cuda.py's, on a GPU."""

import math

import helpers
import pytest
import torch
from helpers import VARIANTS, make_trainer, reads_raise

from nmt.config import TrainerConfig
from nmt.device import capability
from nmt.models.model import static_shapes
from nmt.text.batches import StaticShapes
from nmt.text.data import PAD_ID, collate
from nmt.training.loss import batch_loss
from nmt.training.optim import load_optimizer, make_optimizer, set_lr
from nmt.training.update import WARMUP, Mode, refusal

STATIC = Mode(static=True)  # the batches and encoders of a captured update, its body run eagerly


def test_static_batches_hold_every_pair_once_in_a_few_shapes(tmp_path, sample_vocabulary, sample_splits):
    trainer = make_trainer(tmp_path, sample_vocabulary, sample_splits.train[:300], "bahdanau", mode=STATIC)
    static = trainer.sampler.static
    assert static.max_tokens == 400 and trainer.collate == static.collate
    for epoch in (0, 1):
        trainer.sampler.set_epoch(epoch)
        batches = trainer.sampler.batches()
        assert sorted(i for b in batches for i in b) == sorted(trainer.sampler.kept.tolist())
        shapes = set()
        for indices in batches:
            batch = static.collate([trainer.dataset[i] for i in indices])
            length = batch.source.shape[1]
            assert length % 8 == 0 and batch.source.shape == batch.target_out.shape == (static.rows(length), length)
            shapes.add(batch.source.shape)
        assert len(shapes) <= 100 // 8 + 1  # one shape per length bucket: what a graph is captured for
    assert trainer.sampler.batches() == trainer.sampler.batches()  # an epoch's batches are the same every time


def test_static_collate_pads_rows_and_positions_that_weigh_nothing():
    static = StaticShapes(64, width=8)
    items = [(0, [5, 6, 7], [8, 9]), (1, [5], [8, 9, 10, 11, 12])]
    batch = static.collate(items)
    today = collate(items)
    assert batch.source.shape == batch.target_in.shape == batch.target_out.shape == (8, 8)  # 64 tokens of length 8
    assert torch.equal(batch.source[:2, :3], today.source) and batch.source[2:, 0].eq(3).all()  # eos: not all padding
    assert batch.source_mask[2:].sum() == 6 and batch.target_out[2:].eq(PAD_ID).all()
    weights = batch.token_weights.view(8, 8)
    assert torch.equal(weights.bool(), batch.target_out != PAD_ID) and weights.sum() == today.target_tokens
    assert batch.target_positions is None and batch.source_lengths.tolist() == [3, 1, 1, 1, 1, 1, 1, 1]
    with pytest.raises(ValueError, match="do not fit the static shape"):
        StaticShapes(16, width=8).collate([*items, *items])


def losses_of(trainer, static: bool, dtype: torch.dtype) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The summed loss of the trainer's first 12 pairs, as today's batch or a static one (encoders unpacked), and the
    gradients it gives."""
    model = trainer.model.train()
    items = [trainer.dataset[i] for i in range(12)]
    batch = StaticShapes(1024).collate(items) if static else collate(items)
    model.zero_grad()
    with static_shapes(model) if static else torch.enable_grad():
        loss = batch_loss(model, model.features, batch, 0.1, trainer.device, dtype)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


DETERMINISTIC = [(n, o) for n, o in VARIANTS if not any("hard=" in x for x in o)]  # hard attention draws samples


@pytest.mark.parametrize("name, overrides", DETERMINISTIC, ids=[f"{n}{''.join(o)}" for n, o in DETERMINISTIC])
def test_a_static_batch_gives_the_loss_and_gradients_of_todays(tmp_path, sample_vocabulary, sample_splits, name,
                                                               overrides):  # fmt: skip
    """The same sentences as today's batch and as a static one (padded rows and positions, encoders unpacked): the
    same summed loss and the same gradients, to float32 rounding."""
    trainer = make_trainer(tmp_path, sample_vocabulary, sample_splits.train[:64], name, 0.0, overrides, max_steps=1)
    (loss, grads), (static_loss, static_grads) = (losses_of(trainer, static, torch.float32) for static in (0, 1))
    torch.testing.assert_close(static_loss, loss, rtol=1e-5, atol=1e-4)
    assert len(grads) == len(static_grads)
    for got, want in zip(static_grads, grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, overrides", VARIANTS, ids=[f"{n}{''.join(o)}" for n, o in VARIANTS])
def test_the_update_a_graph_captures_reads_nothing_back_and_packs_nothing(tmp_path, sample_vocabulary, sample_splits,
                                                                          monkeypatch, name, overrides):  # fmt: skip
    """`Update.body` is what a graph captures: inside it no tensor is read back, packing's host reads included (the
    encoders run unpacked); only the CPU optimiser's step counter is let through (on a GPU it is capturable)."""
    trainer = make_trainer(
        tmp_path, sample_vocabulary, sample_splits.train[:64], name, 0.1, overrides, mode=STATIC, max_steps=3
    )
    updates = trainer.updates()
    batches, tokens, *_ = next(updates)
    trainer.update.body(batches, torch.tensor(1.0 / tokens))  # the first creates the gradients and optimiser state
    batches, tokens, *_ = next(updates)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    monkeypatch.setattr(helpers, "HOST_DATA", (helpers.HOST_DATA[-1],))  # the optimiser only
    with reads_raise(monkeypatch):
        loss, norm = trainer.update.body(batches, torch.tensor(1.0 / tokens))
    assert torch.isfinite(loss) and torch.isfinite(norm) and loss > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))  # a step was made


def test_static_updates_learn_as_todays_do(tmp_path, sample_vocabulary, sample_splits):
    """From the same seed, today's batches and eager update against static batches and the update a graph captures,
    each for the same number of real target tokens (what a budget counts; a static batch holds fewer, its rows of
    padding and rounded lengths taking the rest): the training loss falls as far, within the noise of other batches."""
    pairs, curves = sample_splits.train[:400], []
    for mode in (None, STATIC):
        trainer = make_trainer(tmp_path / str(bool(mode)), sample_vocabulary, pairs, "bahdanau", mode=mode)
        losses, trained = [], 0
        for batches, tokens, *_ in trainer.updates():
            loss, _ = trainer.update(batches, tokens)
            losses.append((float(loss), tokens))
            trained += tokens
            if trained >= 15_000:  # about 50 updates: 4.6 to 1.3 and 1.4 nats a token (1.7 at 12,000, 0.8 at 30,000)
                break
        curves.append(losses)
    mean = [[sum(x[0] for x in part) / sum(x[1] for x in part) for part in (c[:5], c[-len(c) // 10 :])] for c in curves]
    (today_first, today), (static_first, static) = mean
    assert today < 0.5 * today_first and static < 0.5 * static_first  # both learned
    assert math.isclose(static, today, rel_tol=0.2), (mean, [len(c) for c in curves])


def test_graphs_are_refused_by_name_where_a_run_cannot_hold_them(tmp_path, sample_vocabulary, sample_splits):
    cuda = torch.device("cuda")
    assert refusal(cuda, 1, 1, torch.bfloat16) is None and refusal(cuda, 1, 1, torch.float32) is None
    assert "GPU" in refusal(torch.device("cpu"), 1, 1, torch.float32)
    assert "DDP" in refusal(cuda, 2, 1, torch.float32)
    assert "trainer.accumulate" in refusal(cuda, 1, 2, torch.float32)
    assert "fp16" in refusal(cuda, 1, 1, torch.float16)
    trainer = make_trainer(tmp_path, sample_vocabulary, sample_splits.train[:64], "luong", max_steps=1)
    assert trainer.sampler.static is None and trainer.collate is collate  # a CPU run: the corpus's own batches
    assert not trainer.mode.captured and trainer.mode.refusal == "CUDA graphs need a GPU"
    trainer.update(*next(trainer.updates())[:2])
    assert trainer.update.graphs is None
    off = make_trainer(tmp_path / "off", sample_vocabulary, sample_splits.train[:64], "luong", cuda_graphs=False)
    assert off.mode.refusal == "trainer.cuda_graphs=false"


def test_an_optimizer_state_moves_between_captured_and_eager_runs():
    """A checkpoint of a captured run (fused, capturable, learning rate a tensor, step counts on the GPU) continues
    eagerly, and the other way round: the running optimiser keeps its implementation, the rate comes back a float,
    the step counts go where that implementation keeps them; a new base rate is written in place into a tensor."""
    model = torch.nn.Linear(3, 2)
    model(torch.randn(4, 3)).sum().backward()
    optimizer = make_optimizer(model, TrainerConfig(lr=0.5))
    optimizer.step()
    captured_state = optimizer.state_dict()  # made a captured run's by hand: no GPU here
    for group in captured_state["param_groups"]:
        group.update(fused=True, capturable=True, lr=torch.tensor(0.25))
    eager = make_optimizer(model, TrainerConfig(lr=0.5))
    load_optimizer(eager, captured_state)
    group = eager.param_groups[0]
    assert group["lr"] == 0.25 and isinstance(group["lr"], float) and not group["capturable"] and not group["fused"]
    assert all(state["step"].device.type == "cpu" and state["step"] == 1 for state in eager.state.values())
    eager.step()  # runs
    group["lr"] = torch.tensor(0.25)
    schedule = torch.optim.lr_scheduler.LambdaLR(eager, lambda step: 1.0)
    held = group["lr"]
    set_lr(eager, schedule, 0.1)
    assert group["lr"] is held and math.isclose(
        float(held), 0.1, rel_tol=1e-6
    )  # in place: a captured graph reads this tensor


class Replayed:
    """What `cuda_graph` gives, on a CPU: capturing runs nothing and allocates the static outputs; a replay runs the
    step on the static inputs and writes its results into them, as a graph's kernels do."""

    def __init__(self, step, inputs, scale):
        self.step, self.inputs, self.scale = step, inputs, scale
        self.outputs = (torch.zeros(()), torch.zeros(()))

    def replay(self):
        for static, result in zip(self.outputs, self.step(self.inputs, self.scale), strict=True):
            static.copy_(result)


def record_on_cpu(step, inputs, scale, pool):
    graph = Replayed(step, inputs, scale)
    return graph, graph.outputs, pool


@pytest.mark.parametrize("name", ["sutskever", "bahdanau", "luong", "transformer"])
def test_the_captured_path_gives_the_eager_paths_weights_bit_for_bit(tmp_path, sample_vocabulary, sample_splits, name):
    """One update body, two paths: run as it is, or through the graphs' bookkeeping with a recorder that runs on the
    CPU (each shape's WARMUP eager updates, a capture, replays that read each new batch through the static inputs).
    After 30 fp32 updates with dropout, the same losses and the same weights, bit for bit: nothing of a batch is left
    out of the static copy, the schedule is stepped once either way, the random draws are the same."""
    pairs, runs = sample_splits.train[:300], []
    for mode in (STATIC, Mode(static=True, record=record_on_cpu)):
        trainer = make_trainer(tmp_path / str(mode.captured), sample_vocabulary, pairs, name, 0.1, mode=mode)
        torch.manual_seed(5)
        losses = []
        for number, (batches, tokens, *_) in enumerate(trainer.updates()):
            if number == 30:
                break
            loss, _ = trainer.update(batches, tokens)
            losses.append(loss.clone())
        runs.append((trainer, losses))
    (eager, eager_losses), (captured, captured_losses) = runs
    graphs = captured.update.graphs
    assert eager.update.graphs is None and graphs.graphs and graphs.replays > 0 and not graphs.failed
    assert graphs.replays + sum(graphs.seen.values()) == 30
    assert all(n == WARMUP for key, n in graphs.seen.items() if key in graphs.graphs)
    assert all(torch.equal(a, b) for a, b in zip(eager_losses, captured_losses, strict=True))
    assert eager.schedule.last_epoch == captured.schedule.last_epoch == 30
    for got, want in zip(captured.model.parameters(), eager.model.parameters(), strict=True):
        assert torch.equal(got, want)


def test_a_capture_that_fails_leaves_every_later_update_eager_with_the_reason_logged(
    tmp_path, sample_vocabulary, sample_splits, caplog
):
    def refuse(step, inputs, scale, pool):
        raise RuntimeError("operation not permitted when stream is capturing")

    trainer = make_trainer(
        tmp_path, sample_vocabulary, sample_splits.train[:300], "bahdanau", mode=Mode(static=True, record=refuse)
    )
    batches, tokens, *_ = next(trainer.updates())
    for _ in range(WARMUP + 3):  # the warm-ups, the capture that fails, then eager updates
        loss, norm = trainer.update(batches, tokens)
        assert torch.isfinite(loss) and torch.isfinite(norm)
    graphs = trainer.update.graphs
    assert graphs.failed.startswith("RuntimeError: operation not permitted") and not graphs.graphs
    assert "could not be captured" in caplog.text and "updates run eagerly" in caplog.text


@pytest.mark.skipif(not capability(torch.device("cpu")).bf16_kernels, reason="this CPU builds no bf16 LSTM (AVX2)")
@pytest.mark.parametrize("name", ["sutskever", "bahdanau", "luong", "transformer"])
def test_a_static_batch_in_bf16_stays_close_to_todays(tmp_path, sample_vocabulary, sample_splits, name):
    """Under bf16 autocast (what a GPU with native bf16 trains in) the unpacked encoders' products and the closed-form
    cell state round as the packed run's do: the loss and the gradient stay within bf16's rounding."""
    trainer = make_trainer(tmp_path, sample_vocabulary, sample_splits.train[:64], name, 0.0, max_steps=1)
    (loss, grads), (static_loss, static_grads) = (losses_of(trainer, static, torch.bfloat16) for static in (0, 1))
    grad, static_grad = torch.cat([g.flatten() for g in grads]), torch.cat([g.flatten() for g in static_grads])
    torch.testing.assert_close(static_loss, loss, rtol=2e-2, atol=0)
    assert (static_grad - grad).norm() < 0.05 * grad.norm()


def test_a_run_resumed_with_the_other_kind_of_batches_starts_its_next_epoch(
    tmp_path, sample_vocabulary, sample_splits, caplog
):
    """A checkpoint saved part-way through an epoch of today's batches, resumed where batches are static (a CPU
    run continued on a GPU, or the other way round): its place in the epoch means nothing there, so the next epoch
    starts, said in the log; resumed with the same kind, it goes on where it stood."""
    pairs = sample_splits.train[:300]
    first = make_trainer(tmp_path, sample_vocabulary, pairs, "bahdanau", max_steps=3)
    first.train()
    saved = first.progress
    assert 0 < saved.batch_in_epoch and not saved.static_batches
    same = make_trainer(tmp_path / "same", sample_vocabulary, pairs, "bahdanau", max_steps=6)
    same.restore(tmp_path / "last.pt")
    assert (same.progress.epoch, same.progress.batch_in_epoch) == (saved.epoch, saved.batch_in_epoch)
    other = make_trainer(tmp_path / "other", sample_vocabulary, pairs, "bahdanau", mode=STATIC, max_steps=6)
    other.restore(tmp_path / "last.pt")
    assert (other.progress.epoch, other.progress.batch_in_epoch) == (saved.epoch + 1, 0)
    assert other.progress.static_batches and "its epoch was cut in other batches" in caplog.text
