"""The contract between a model and the rest of nmt: what the trainer, the search and the logs call, and nothing else.

Every model (`nmt.models.rnn`, `nmt.models.transformer`) declares `Seq2Seq` as a base class; `tests/test_contract.py`
builds every config in `configs/model/` and checks it against this contract, so a new model file is tested without
editing a test. The trainer and the search never ask which model they hold.

Conventions: tensors are batch-first; B sentences, S source tokens, T target tokens, V target vocabulary, F the size
of the vector the output layer reads. Masks are bool, True on real tokens. Token ids: pad 0, unk 1, bos 2, eos 3.

The decoding state is a flat `dict[str, Tensor]`, every tensor with the batch (or beam) on dimension 0, so beam search
can reorder any model's state with `index_select(0, ...)`. Naming rule: an entry whose name starts with `source_`
depends on the source sentence alone (encoder annotations, attention keys, the cross-attention cache, the mask);
`encode` makes it and `decode_step` passes it on as it is. Beam search keeps one copy of those per sentence instead of
reordering them at every step; every other entry (recurrent states, self-attention caches, positions) is reordered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from nmt.models.flops import Shape

State = dict[str, torch.Tensor]

# The modules that hold the families: nmt builds a config's `_target_` only when it is one of their Seq2Seq classes
# or an attention (nmt.build.buildable; tests/test_hostile_cli.py checks that no model lives elsewhere)
FAMILY_MODULES = ("nmt.models.rnn", "nmt.models.transformer")


@contextlib.contextmanager
def static_shapes(model: nn.Module, static: bool = True) -> Iterator[None]:
    """While the block runs, every part of `model` that would size a tensor by the batch's contents runs with the
    shapes of the padded batch instead, as a captured update needs (nmt.training.update): each such module says how,
    with a `static_shapes(static: bool)` method of its own (the RNN encoders: unpacked, where they pack by the
    sentences' lengths). The training core asks the model, never which family it holds."""
    parts = [m for m in model.modules() if callable(getattr(m, "static_shapes", None))] if static else []
    for part in parts:
        part.static_shapes(True)
    try:
        yield
    finally:
        for part in parts:
            part.static_shapes(False)


@runtime_checkable
class Seq2Seq(Protocol):
    """An encoder-decoder translation model."""

    output: nn.Linear  # the output layer, F -> V; the trainer fuses it with the loss (nmt/training/loss.py)

    def forward(
        self, source: torch.Tensor, source_mask: torch.Tensor, target_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing: logits (B, T, V) for `target_in` (B, T) = bos y_1 .. y_{T-1}, and the attention weights
        over the source (B, T, S), zero on padding, or None for a model without attention."""
        ...

    def features(
        self,
        source: torch.Tensor,
        source_mask: torch.Tensor,
        target_in: torch.Tensor,
        source_lengths: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`forward` without the output layer: what `output` reads (B, T, F), and the same attention or None.
        `forward(...)[0]` equals `output(features(...)[0])`. `source_lengths`: the sentences' lengths on the CPU,
        when the caller has them (the trainer's batches do), so that nothing is read back from the device (the RNN
        encoders pack their input by them); None: from the mask."""
        ...

    def encode(
        self,
        source: torch.Tensor,
        source_mask: torch.Tensor,
        max_steps: int | None = None,
        source_lengths: torch.Tensor | None = None,
    ) -> State:
        """Read the source (B, S) once; the state that the first `decode_step` starts from (see the naming rule).
        `max_steps`: the most decode_steps that will follow, for a model whose state holds every step (the
        Transformer's cache, allocated once; None: its own default); the others need not use it. `source_lengths`:
        as in `features`."""
        ...

    def decode_step(self, previous: torch.Tensor, state: State) -> tuple[torch.Tensor, State, torch.Tensor | None]:
        """One target token: `previous` (B,) is the token just produced (bos at first). Returns logits (B, V), the new
        state (a new dict; `source_*` entries passed on unchanged) and the attention over the source (B, S) or None.
        Step after step, the logits equal those of `forward` on the same tokens."""
        ...

    def attention_maps(
        self, source: torch.Tensor, source_mask: torch.Tensor, target_in: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The attention weights worth plotting, by name, each (B, heads or 1, rows, S): rows are target positions,
        or source positions for names starting with `encoder_self`. Empty for a model without attention."""
        ...

    def attention_loss(
        self, attention: torch.Tensor, target_mask: torch.Tensor, token_loss: torch.Tensor
    ) -> torch.Tensor | None:
        """A training term for attention that no gradient reaches through the loss: hard attention's draws, trained by
        REINFORCE (`nmt.models.attention.Attention.policy_loss`). `attention` is what `features` returned (B, T, S),
        target_mask (B, T) the real target tokens, token_loss (B, T) each token's -log p(y_t) (no smoothing, zero on
        padding). None (this default) for every model whose attention the loss's gradient trains directly."""
        return None

    def training_flops(self, shape: Shape) -> int:
        """The floating-point operations of the matrix products of one training update (forward, backward, the
        fused output layer and loss) on a batch of `shape`'s sentence lengths, from the model's own formula
        (`nmt.models.flops`): what a compute budget counts, the same on any machine."""
        ...
