"""The recurrent encoder-decoders: Sutskever et al. 2014, Bahdanau et al. 2015 and Luong et al. 2015.

All three keep the contract of `nmt.models.model.Seq2Seq` (forward, features, encode, decode_step, attention_maps and
the `source_*` naming rule of the decoding state). Recurrent states are kept batch-first in the state, (B, layers, H),
and transposed for nn.LSTM.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from nmt.models.attention import Attention, LocalAttention
from nmt.models.dropout import Dropout
from nmt.models.flops import Shape, attention_products, linear, output_and_loss, packed_rnn, padded_rnn
from nmt.models.model import Seq2Seq, State
from nmt.models.unpacked import reverse_padded, unpacked_rnn

AttentionFactory = Callable[..., Attention]


def uniform_init(model: nn.Module, init_range: float, embeddings: bool = True) -> None:
    """Every parameter from U(-init_range, init_range), as Sutskever et al. (0.08) and Luong et al. (0.1) do; the
    padding embeddings stay zero. init_range 0 keeps PyTorch's default initialisation; `embeddings=False` keeps
    PyTorch's N(0, 1) for the embedding tables only."""
    if not init_range:
        return
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    for parameter in model.parameters():
        if embeddings or id(parameter) not in tables:
            nn.init.uniform_(parameter, -init_range, init_range)
    for module in model.modules():
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()


class Encoder(nn.Module):
    """Embedding and a (bidirectional) multi-layer RNN over the real tokens only (packed sequences)."""

    def __init__(
        self,
        vocab_size: int,
        pad_id: int,
        embedding_size: int,
        hidden_size: int,
        layers: int,
        dropout: float,
        cell: str = "lstm",
        bidirectional: bool = False,
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_size, padding_idx=pad_id)
        self.dropout = Dropout(dropout)
        rnn_class = {"lstm": nn.LSTM, "gru": nn.GRU}[cell]
        self.rnn = rnn_class(
            embedding_size,
            hidden_size,
            layers,
            batch_first=True,
            dropout=dropout if layers > 1 else 0.0,
            bidirectional=bidirectional,
        )
        self.packed = True  # False while an update is captured (nmt.models.model.static_shapes)

    def static_shapes(self, static: bool) -> None:
        """Unpacked while `static` (nmt.models.model.static_shapes): packing sizes a tensor by the batch's tokens."""
        self.packed = not static

    def forward(
        self, source: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, tuple | torch.Tensor]:
        """Annotations (B, S, directions * H) and the final states ((layers * directions, B, H), as nn.LSTM gives)."""
        embedded = self.dropout(self.embedding(source))  # (B, S, E)
        if self.packed:
            lengths = mask.sum(1).cpu() if lengths is None else lengths  # packing takes them on the CPU
            packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
            outputs, final = self.rnn(packed)
            outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=source.shape[1])
        else:  # the same figures with every shape fixed by the padded batch, for a captured update (training.update)
            outputs, final = unpacked_rnn(self.rnn, embedded, mask)
        if torch.is_autocast_enabled(outputs.device.type):
            # Autocast runs nn.GRU in fp32 (it covers nn.LSTM only). Cast its annotations once here; left in fp32,
            # every decoder step's attention product would cast (and keep for backward) a copy of its own.
            outputs = outputs.to(torch.get_autocast_dtype(outputs.device.type))
        return outputs, final

    def flops(self, lengths: tuple[int, ...]) -> int:
        rnn = self.rnn
        gates = 4 if isinstance(rnn, nn.LSTM) else 3
        return packed_rnn(lengths, rnn.input_size, rnn.hidden_size, gates, rnn.num_layers, rnn.bidirectional)


def batch_first(state: torch.Tensor) -> torch.Tensor:
    return state.transpose(0, 1).contiguous()  # (layers, B, H) -> (B, layers, H)


def layers_first(state: torch.Tensor) -> torch.Tensor:
    return state.transpose(0, 1).contiguous()  # (B, layers, H) -> (layers, B, H)


class AlignmentMaps:
    """`attention_maps` for the attention RNNs: their one alignment, (B, 1, T, S), from teacher forcing; and their
    attention's own training term (hard attention by REINFORCE)."""

    @torch.no_grad()
    def attention_maps(self, source: torch.Tensor, source_mask: torch.Tensor, target_in: torch.Tensor):
        _, attention = self(source, source_mask, target_in)
        return {} if attention is None else {"alignment": attention[:, None]}  # None: a fixed context

    def attention_loss(self, attention: torch.Tensor, target_mask: torch.Tensor, token_loss: torch.Tensor):
        return self.attention.policy_loss(attention, target_mask, token_loss)


class SutskeverSeq2Seq(nn.Module, Seq2Seq):
    """Sutskever et al. 2014: a multi-layer LSTM reads the (reversed) source; its final states start the decoder.

    No attention: the whole sentence must pass through the fixed-size final state.
    """

    SCORES: tuple[str, ...] = ()  # no attention (the model/attention options it takes; nmt.build checks them)

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        pad_id: int,
        *,
        embedding_size: int,
        hidden_size: int,
        layers: int,
        dropout: float,
        reverse_source: bool,
        init_range: float,
    ):
        super().__init__()
        self.reverse_source = reverse_source
        self.encoder = Encoder(source_vocab_size, pad_id, embedding_size, hidden_size, layers, dropout)
        self.embedding = nn.Embedding(target_vocab_size, embedding_size, padding_idx=pad_id)
        self.decoder = nn.LSTM(
            embedding_size, hidden_size, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0
        )
        self.dropout = Dropout(dropout)
        self.output = nn.Linear(hidden_size, target_vocab_size)
        uniform_init(self, init_range)

    def encode(
        self,
        source: torch.Tensor,
        source_mask: torch.Tensor,
        max_steps: int | None = None,
        source_lengths: torch.Tensor | None = None,
    ) -> State:
        if self.reverse_source:  # section 3.3: reversing the source makes the first words' dependencies short
            source = reverse_padded(source, source_mask)
        _, (hidden, cell) = self.encoder(source, source_mask, source_lengths)
        return {"hidden": batch_first(hidden), "cell": batch_first(cell)}  # (B, layers, H) each

    def decode_step(self, previous: torch.Tensor, state: State) -> tuple[torch.Tensor, State, None]:
        embedded = self.dropout(self.embedding(previous[:, None]))  # (B, 1, E)
        output, (hidden, cell) = self.decoder(embedded, (layers_first(state["hidden"]), layers_first(state["cell"])))
        logits = self.output(self.dropout(output[:, 0]))  # (B, V)
        return logits, {"hidden": batch_first(hidden), "cell": batch_first(cell)}, None

    def features(
        self,
        source: torch.Tensor,
        source_mask: torch.Tensor,
        target_in: torch.Tensor,
        source_lengths: torch.Tensor | None = None,
    ):
        state = self.encode(source, source_mask, source_lengths=source_lengths)
        embedded = self.dropout(self.embedding(target_in))  # (B, T, E)
        # Teacher forcing needs no per-step Python: one nn.LSTM call over the whole target.
        outputs, _ = self.decoder(embedded, (layers_first(state["hidden"]), layers_first(state["cell"])))
        return self.dropout(outputs), None  # (B, T, H)

    def forward(self, source: torch.Tensor, source_mask: torch.Tensor, target_in: torch.Tensor):
        features, _ = self.features(source, source_mask, target_in)
        return self.output(features), None  # (B, T, V)

    def attention_maps(self, source: torch.Tensor, source_mask: torch.Tensor, target_in: torch.Tensor):
        return {}  # no attention: nothing to plot

    def training_flops(self, shape: Shape) -> int:
        decoder, rows = self.decoder, shape.batch * shape.target_max
        return (
            self.encoder.flops(shape.source)
            + padded_rnn(rows, decoder.input_size, decoder.hidden_size, 4, decoder.num_layers)  # teacher forcing
            + output_and_loss(shape, decoder.hidden_size, self.output.out_features)
        )


class BahdanauSeq2Seq(AlignmentMaps, nn.Module, Seq2Seq):
    """Bahdanau, Cho and Bengio 2015 ("RNNsearch"), following its appendix A.

    Encoder: a bidirectional RNN; annotation h_i = [forward h_i; backward h_i].
    Decoder: s_0 = tanh(W_s backward h_1); at step t the additive attention reads the *previous* state s_{t-1},
    c_t = sum_i a_ti h_i, s_t = RNN([E y_{t-1}; c_t], s_{t-1}), and the output layer reads s_t, c_t and E y_{t-1}
    through a maxout layer (A.2.2).
    """

    # eq. 6; Luong's scores read h_t, which this decoder has not yet when it attends. none: the fixed context of
    # RNNencdec, the paper's baseline (nmt.models.attention.FixedContext)
    SCORES = ("additive", "none")

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        pad_id: int,
        *,
        attention: AttentionFactory,
        embedding_size: int,
        hidden_size: int,
        encoder_layers: int,
        readout_size: int,
        dropout: float,
        cell: str,
    ):
        super().__init__()
        if cell not in ("gru", "lstm"):
            raise ValueError(f"model.cell={cell!r}: use gru or lstm")
        self.cell_type = cell
        self.encoder = Encoder(
            source_vocab_size,
            pad_id,
            embedding_size,
            hidden_size,
            encoder_layers,
            dropout,
            cell=cell,
            bidirectional=True,
        )
        self.attention = attention(query_size=hidden_size, key_size=2 * hidden_size)
        self.initial = nn.Linear(hidden_size, hidden_size)  # W_s
        self.embedding = nn.Embedding(target_vocab_size, embedding_size, padding_idx=pad_id)
        cell_class = {"gru": nn.GRUCell, "lstm": nn.LSTMCell}[cell]
        self.decoder = cell_class(embedding_size + 2 * hidden_size, hidden_size)
        self.readout = nn.Linear(hidden_size + 2 * hidden_size + embedding_size, 2 * readout_size)  # U_o, C_o, V_o
        self.dropout = Dropout(dropout)
        self.output = nn.Linear(readout_size, target_vocab_size)  # W_o

    def encode(
        self,
        source: torch.Tensor,
        source_mask: torch.Tensor,
        max_steps: int | None = None,
        source_lengths: torch.Tensor | None = None,
    ) -> State:
        memory, final = self.encoder(source, source_mask, source_lengths)  # (B, S, 2H)
        final_hidden = final[0] if isinstance(final, tuple) else final  # (layers * 2, B, H); [-1] = top backward
        hidden = torch.tanh(self.initial(final_hidden[-1]))  # s_0, (B, H)
        state = {
            "hidden": hidden,
            "source_memory": memory,
            "source_keys": self.attention.prepare(memory, source_mask),
            "source_mask": source_mask,
        }
        if self.cell_type == "lstm":
            state["cell"] = torch.zeros_like(hidden)
        return state

    def recur(self, embedded: torch.Tensor, state: State) -> tuple[torch.Tensor, State, torch.Tensor]:
        """One decoder step from E y_{t-1} (B, E): context (B, 2H), the new state, weights (B, S)."""
        query = state["hidden"][:, None, :]  # s_{t-1}, (B, 1, H)
        context, weights = self.attention(query, state["source_keys"], state["source_memory"], state["source_mask"])
        context = context[:, 0]  # (B, 2H)
        rnn_input = torch.cat([embedded, context], dim=-1)
        if self.cell_type == "lstm":
            hidden, cell = self.decoder(rnn_input, (state["hidden"], state["cell"]))
            new_state = {**state, "hidden": hidden, "cell": cell}
        else:
            new_state = {**state, "hidden": self.decoder(rnn_input, state["hidden"])}
        return context, new_state, None if weights is None else weights[:, 0]

    def maxout(self, hidden: torch.Tensor, context: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        """Maxout readout t_i = max over pairs of (U_o s_i + V_o E y_{i-1} + C_o c_i), which W_o reads: (..., R)."""
        readout = self.readout(torch.cat([hidden, context, embedded], dim=-1))  # (..., 2R)
        return self.dropout(readout.unflatten(-1, (-1, 2)).amax(-1))

    def decode_step(self, previous: torch.Tensor, state: State) -> tuple[torch.Tensor, State, torch.Tensor]:
        embedded = self.dropout(self.embedding(previous))  # (B, E)
        context, state, weights = self.recur(embedded, state)
        return self.output(self.maxout(state["hidden"], context, embedded)), state, weights

    def features(
        self,
        source: torch.Tensor,
        source_mask: torch.Tensor,
        target_in: torch.Tensor,
        source_lengths: torch.Tensor | None = None,
    ):
        state = self.encode(source, source_mask, source_lengths=source_lengths)
        embedded = self.dropout(self.embedding(target_in))  # (B, T, E)
        hiddens, contexts, weights = [], [], []
        for t in range(target_in.shape[1]):  # the attention reads s_{t-1}, so the recurrence is step by step
            context, state, step_weights = self.recur(embedded[:, t], state)
            hiddens.append(state["hidden"])
            contexts.append(context)
            weights.append(step_weights)
        # The readout (and, after it, the large output layer) runs once over all steps.
        readout = self.maxout(torch.stack(hiddens, 1), torch.stack(contexts, 1), embedded)  # (B, T, R)
        return readout, None if weights[0] is None else torch.stack(weights, 1)  # (B, T, S); None: fixed context

    def forward(self, source: torch.Tensor, source_mask: torch.Tensor, target_in: torch.Tensor):
        features, weights = self.features(source, source_mask, target_in)
        return self.output(features), weights  # (B, T, V), (B, T, S)

    def training_flops(self, shape: Shape) -> int:
        batch, source, target = shape.batch, shape.source_max, shape.target_max
        hidden, gates = self.decoder.hidden_size, 4 if self.cell_type == "lstm" else 3
        return (
            self.encoder.flops(shape.source)
            + linear(batch, hidden, hidden)  # s_0
            + self.attention.flops(batch, target, source)
            + self.attention.context_flops(batch * target, source, 2 * hidden)  # c_t = sum_i a_ti h_i
            + padded_rnn(batch * target, self.decoder.input_size, hidden, gates, 1)  # every step of every row
            + linear(batch * target, self.readout.in_features, self.readout.out_features)  # maxout
            + output_and_loss(shape, self.output.in_features, self.output.out_features)
        )


class LuongSeq2Seq(AlignmentMaps, nn.Module, Seq2Seq):
    """Luong, Pham and Manning 2015: stacked LSTMs with attention on the current top state h_t.

    c_t = sum_s a_t(s) h_s with a score from `attention` (dot, general or concat, eq. 8), global or local (section
    3.2); the attentional state h~_t = tanh(W_c [c_t; h_t]) (eq. 5) feeds the softmax (eq. 6) and, with input
    feeding (section 3.3), the next step's input. Dropout is applied where h~_t enters the softmax; the fed-back copy
    skips it unless `feed_dropout` (a fresh mask each step on that path would be dropout on a recurrent connection,
    which the paper's recipe, Zaremba et al. 2014, avoids).

    `bidirectional` is not the paper's: the encoder reads both ways with hidden_size / 2 per direction (as OpenNMT's
    `brnn`), so annotations keep size H and each layer's two final states, side by side, start the decoder. It gives
    every annotation both sides of its word, as Bahdanau's encoder does, and so separates the attention from the encoder
    in a comparison.
    """

    SCORES = ("dot", "general", "concat", "location")  # eq. 8 (concat is Luong's form of the additive score)

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        pad_id: int,
        *,
        attention: AttentionFactory,
        embedding_size: int,
        hidden_size: int,
        layers: int,
        dropout: float,
        input_feeding: bool,
        feed_dropout: bool,
        alignment: str,
        window: int,
        reverse_source: bool,
        init_range: float,
        uniform_embeddings: bool,
        bidirectional: bool,
    ):
        super().__init__()
        self.check(alignment, bidirectional, hidden_size)
        self.input_feeding, self.feed_dropout, self.reverse_source = input_feeding, feed_dropout, reverse_source
        self.bidirectional = bidirectional
        self.encoder = Encoder(
            source_vocab_size,
            pad_id,
            embedding_size,
            hidden_size // (1 + bidirectional),
            layers,
            dropout,
            bidirectional=bidirectional,
        )
        score = attention(query_size=hidden_size, key_size=hidden_size)
        if alignment == "global":
            self.attention = score
        else:
            self.attention = LocalAttention(score, hidden_size, window, predictive=alignment == "local_p")
        self.embedding = nn.Embedding(target_vocab_size, embedding_size, padding_idx=pad_id)
        input_size = embedding_size + (hidden_size if input_feeding else 0)
        self.decoder = nn.LSTM(
            input_size, hidden_size, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0
        )
        self.combine = nn.Linear(2 * hidden_size, hidden_size, bias=False)  # W_c
        self.dropout = Dropout(dropout)
        self.output = nn.Linear(hidden_size, target_vocab_size)  # W_s
        uniform_init(self, init_range, embeddings=uniform_embeddings)

    @staticmethod
    def check(alignment: str, bidirectional: bool, hidden_size: int) -> None:
        if alignment not in ("global", "local_m", "local_p"):
            raise ValueError(f"model.alignment={alignment!r}: use global, local_m or local_p")
        if bidirectional and hidden_size % 2:
            raise ValueError(
                f"model.bidirectional=true splits model.hidden_size={hidden_size} between two directions: make it even"
            )

    def encode(
        self,
        source: torch.Tensor,
        source_mask: torch.Tensor,
        max_steps: int | None = None,
        source_lengths: torch.Tensor | None = None,
    ) -> State:
        if self.reverse_source:  # the encoder reads the sentence backwards (section 4.1, "reverse") ...
            memory, (hidden, cell) = self.encoder(reverse_padded(source, source_mask), source_mask, source_lengths)
            memory = reverse_padded(memory, source_mask)  # ... and attention sees the annotations in sentence order,
            # so local-m's p_t = t and the heatmaps refer to source words as they are written
        else:
            memory, (hidden, cell) = self.encoder(source, source_mask, source_lengths)  # (B, S, H)
        if self.bidirectional:  # (layers * 2, B, H/2), each layer's forward then backward -> (layers, B, H)
            hidden, cell = (torch.cat([s[0::2], s[1::2]], dim=-1) for s in (hidden, cell))
        batch = source.shape[0]
        return {
            "hidden": batch_first(hidden),  # (B, layers, H)
            "cell": batch_first(cell),
            "source_memory": memory,
            "source_keys": self.attention.prepare(memory, source_mask),
            "source_mask": source_mask,
            "attentional": memory.new_zeros(batch, memory.shape[-1]),  # h~_0 for input feeding
            "position": torch.zeros(batch, dtype=torch.long, device=source.device),  # t, for local-m
        }

    def attend(self, top: torch.Tensor, state: State, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Attentional states h~ (B, T, H) and weights (B, T, S) for top-layer states (B, T, H)."""
        context, weights = self.attention(
            top, state["source_keys"], state["source_memory"], state["source_mask"], positions
        )
        attentional = torch.tanh(self.combine(torch.cat([context, top], dim=-1)))  # eq. 5
        return attentional, weights

    def decode_step(self, previous: torch.Tensor, state: State) -> tuple[torch.Tensor, State, torch.Tensor]:
        features, state, weights = self.step(previous, state)
        return self.output(features), state, weights  # eq. 6: (B, V)

    def step(self, previous: torch.Tensor, state: State) -> tuple[torch.Tensor, State, torch.Tensor]:
        """One decoder step up to the attentional vector h~_t (after dropout), which the output layer reads."""
        embedded = self.dropout(self.embedding(previous))[:, None, :]  # (B, 1, E)
        if self.input_feeding:
            embedded = torch.cat([embedded, state["attentional"][:, None, :]], dim=-1)
        output, (hidden, cell) = self.decoder(embedded, (layers_first(state["hidden"]), layers_first(state["cell"])))
        attentional, weights = self.attend(output, state, state["position"][:, None])
        dropped = self.dropout(attentional[:, 0])  # (B, H)
        new_state = {
            **state,
            "hidden": batch_first(hidden),
            "cell": batch_first(cell),
            "attentional": dropped if self.feed_dropout else attentional[:, 0],
            "position": state["position"] + 1,
        }
        return dropped, new_state, weights[:, 0]

    def features(
        self,
        source: torch.Tensor,
        source_mask: torch.Tensor,
        target_in: torch.Tensor,
        source_lengths: torch.Tensor | None = None,
    ):
        state = self.encode(source, source_mask, source_lengths=source_lengths)
        if self.input_feeding:  # h~_{t-1} enters step t, so the decoder runs step by step
            attentional, weights = [], []
            for t in range(target_in.shape[1]):
                step_attentional, state, step_weights = self.step(target_in[:, t], state)
                attentional.append(step_attentional)
                weights.append(step_weights)
            return torch.stack(attentional, 1), torch.stack(weights, 1)
        # Without input feeding the decoder RNN runs over the whole target at once and attends in one batched product.
        embedded = self.dropout(self.embedding(target_in))  # (B, T, E)
        outputs, _ = self.decoder(embedded, (layers_first(state["hidden"]), layers_first(state["cell"])))
        positions = torch.arange(target_in.shape[1], device=target_in.device)[None, :]  # (1, T)
        attentional, weights = self.attend(outputs, state, positions)
        return self.dropout(attentional), weights  # (B, T, H), (B, T, S)

    def forward(self, source: torch.Tensor, source_mask: torch.Tensor, target_in: torch.Tensor):
        features, weights = self.features(source, source_mask, target_in)
        return self.output(features), weights  # (B, T, V), (B, T, S)

    def training_flops(self, shape: Shape) -> int:
        batch, source, target, decoder = shape.batch, shape.source_max, shape.target_max, self.decoder
        hidden = decoder.hidden_size
        return (
            self.encoder.flops(shape.source)
            + self.attention.flops(batch, target, source)
            + attention_products(batch * target, source, hidden)  # c_t
            + padded_rnn(batch * target, decoder.input_size, hidden, 4, decoder.num_layers)
            + linear(batch * target, 2 * hidden, hidden)  # W_c [c_t; h_t], eq. 5
            + output_and_loss(shape, hidden, self.output.out_features)
        )
