"""Our Transformer as a CTranslate2 model: each weight of `nmt.models.transformer.Transformer` put where
`ctranslate2.specs.TransformerSpec` holds the weight of the same equation (Vaswani et al. 2017), written from the
specification API. The layers line up one for one:

- inputs: token embeddings x sqrt(d_model) (section 3.4) plus our position table (sinusoids interleaved sin, cos as
  in section 3.5, or the learned one), written out in full so the engine adds exactly our vectors;
- each attention: CTranslate2 fuses the projections it applies to one input: W^Q, W^K, W^V stacked for
  self-attention; W^Q alone, then W^K and W^V stacked, for the encoder-decoder attention; W^O last (eq. 1);
- the feed-forward network (eq. 2) and the layer norm of each sublayer, before it (pre-norm, with a final norm on
  each stack) or after the residual (post-norm, the paper's), which the spec's `pre_norm` chooses;
- the output layer, with its bias, tied to the target embedding or not as trained.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch
from torch import nn

from nmt import UserError
from nmt.config import DecodeOptions
from nmt.models.transformer import default_steps
from nmt.text.data import BOS_ID, EOS_ID, UNK_ID, Vocabulary

TRANSFORMER = "nmt.models.transformer.Transformer"


def ctranslate2_module():
    """The ctranslate2 package, or a refusal saying how to install it. Where torch runs AVX512 kernels, CTranslate2
    is asked to run its own too (CT2_FORCE_CPU_ISA, unless set): it chooses AVX2 on every CPU not made by Intel, and
    AVX512 decoded test2016 int8 with beam 5 at 1.18x the speed on an AMD EPYC (medians of 3)."""
    if "ctranslate2" not in sys.modules and torch.backends.cpu.get_cpu_capability() == "AVX512":
        os.environ.setdefault("CT2_FORCE_CPU_ISA", "AVX512")
    try:
        import ctranslate2
    except ImportError:
        raise UserError(
            "format=ctranslate2 and engine=ctranslate2 need CTranslate2: pip install 'nmt-classics[export]' "
            "(or pip install ctranslate2)"
        ) from None
    return ctranslate2


def unsupported(model: dict) -> list[str]:
    """What of a checkpoint's model config CTranslate2's Transformer cannot compute, each as 'option: why' (empty:
    it can be exported)."""
    if model.get("_target_") != TRANSFORMER:
        family = str(model.get("_target_", "?")).rsplit(".", 1)[-1]
        return [
            f"the model is {family}, a recurrent encoder-decoder, and CTranslate2 has no recurrent layers: only a "
            "Transformer exports today; translate with this checkpoint as it is (python translate.py "
            "checkpoint=...)"
        ]
    found = []
    if model.get("window"):
        found.append(
            f"model.window={model['window']}: sliding-window self-attention, a band CTranslate2's attention does not "
            "compute (its encoder attends to every position), so the export would translate differently"
        )
    return found


def array(tensor: torch.Tensor) -> np.ndarray:
    """A copy of a weight in float32: the spec quantizes its arrays in place, and a view would change the model."""
    return tensor.detach().cpu().float().numpy().copy()


def set_linear(spec, *layers: nn.Linear) -> None:
    """The spec's weight (out, in) and bias: the layers' stacked along their outputs when several are fused."""
    spec.weight = np.concatenate([array(layer.weight) for layer in layers])
    spec.bias = np.concatenate([array(layer.bias) for layer in layers])


def set_norm(spec, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = array(norm.weight), array(norm.bias)


def set_attention(spec, attention, self_attention: bool) -> None:
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (eq. 1): the heads split each projection in the same
    contiguous slices in both (nmt.models.attention.MultiHeadAttention.split_heads)."""
    query, key, value = attention.query_projection, attention.key_projection, attention.value_projection
    if self_attention:
        set_linear(spec.linear[0], query, key, value)
    else:
        set_linear(spec.linear[0], query)
        set_linear(spec.linear[1], key, value)
    set_linear(spec.linear[-1], attention.output_projection)


def set_feedforward(spec, feedforward) -> None:
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (eq. 2); the dropout between them does nothing at inference."""
    set_linear(spec.linear_0, feedforward[0])
    set_linear(spec.linear_1, feedforward[-1])


# Positions the exported tables hold: our search's longest output for the longest input decoding takes by default
# (max_input_len 1,024 subwords: 2 x 1,024 + 10, nmt.models.transformer.default_steps). Sinusoids are written that far,
# and learned positions past the last one trained repeat it, as ours do (Embedding.position_vectors)
POSITIONS = default_steps(DecodeOptions.max_input_len)


def set_inputs(stack, embeddings, embedding, length: int) -> None:
    """Token vectors x sqrt(d_model), plus the first `length` position vectors (sinusoidal or learned) as a table."""
    embeddings.weight = array(embedding.tokens.weight)
    stack.scale_embeddings = True
    positions = torch.arange(length)
    stack.position_encodings.encodings = array(embedding.position_vectors(positions, length))


def pieces(processor) -> list[str]:
    """A sentencepiece model's pieces in id order: the engine's vocabulary, so its ids are ours."""
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def transformer_spec(model, vocabulary: Vocabulary):
    """The CTranslate2 specification of a trained `nmt.models.transformer.Transformer` with its vocabulary."""
    specs = ctranslate2_module().specs
    layers = (len(model.encoder), len(model.decoder))
    heads = model.encoder[0].self_attention.heads
    spec = specs.TransformerSpec.from_config(layers, heads, pre_norm=model.pre_norm)
    encoder, decoder = spec.encoder, spec.decoder
    set_inputs(encoder, encoder.embeddings[0], model.source_embedding, POSITIONS)
    set_inputs(decoder, decoder.embeddings, model.target_embedding, POSITIONS)
    for layer_spec, layer in zip(encoder.layer, model.encoder):
        set_attention(layer_spec.self_attention, layer.self_attention, self_attention=True)
        set_feedforward(layer_spec.ffn, layer.feedforward)
        set_norm(layer_spec.self_attention.layer_norm, layer.norms[0])
        set_norm(layer_spec.ffn.layer_norm, layer.norms[1])
    for layer_spec, layer in zip(decoder.layer, model.decoder):
        set_attention(layer_spec.self_attention, layer.self_attention, self_attention=True)
        set_attention(layer_spec.attention, layer.cross_attention, self_attention=False)
        set_feedforward(layer_spec.ffn, layer.feedforward)
        for sublayer, norm in zip((layer_spec.self_attention, layer_spec.attention, layer_spec.ffn), layer.norms):
            set_norm(sublayer.layer_norm, norm)
    if model.pre_norm:  # the final norm of each stack (nmt.models.transformer: encoder_norm, decoder_norm)
        set_norm(encoder.layer_norm, model.encoder_norm)
        set_norm(decoder.layer_norm, model.decoder_norm)
    set_linear(decoder.projection, model.output)
    config = spec.config
    config.layer_norm_epsilon = model.encoder[0].norms[0].eps
    config.unk_token = vocabulary.target.id_to_piece(UNK_ID)
    config.bos_token = config.decoder_start_token = vocabulary.target.id_to_piece(BOS_ID)
    config.eos_token = vocabulary.target.id_to_piece(EOS_ID)
    config.add_source_bos = config.add_source_eos = False  # our sources are their subwords alone
    spec.register_source_vocabulary(pieces(vocabulary.source))
    spec.register_target_vocabulary(pieces(vocabulary.target))
    return spec
