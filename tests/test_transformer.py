"""The Transformer's attention against PyTorch's own module, and the properties of its masks and cache."""

import pytest
import torch
from conftest import compose_config, tiny_model_overrides

from nmt import build
from nmt.models.attention import MultiHeadAttention
from nmt.models.transformer import band
from nmt.text.data import BOS_ID, PAD_ID

D, HEADS = 16, 4


def copy_into_torch(ours: MultiHeadAttention) -> torch.nn.MultiheadAttention:
    reference = torch.nn.MultiheadAttention(D, HEADS, batch_first=True)
    with torch.no_grad():
        reference.in_proj_weight.copy_(
            torch.cat([ours.query_projection.weight, ours.key_projection.weight, ours.value_projection.weight])
        )
        reference.in_proj_bias.copy_(
            torch.cat([ours.query_projection.bias, ours.key_projection.bias, ours.value_projection.bias])
        )
        reference.out_proj.weight.copy_(ours.output_projection.weight)
        reference.out_proj.bias.copy_(ours.output_projection.bias)
    return reference.eval()


@pytest.fixture
def fused_on_cpu(monkeypatch):
    """Take the fused scaled_dot_product_attention path (the GPU's) on the CPU too."""
    monkeypatch.setattr(MultiHeadAttention, "fused_on_cpu", True)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_multi_head_attention_equals_torch(need_weights, fused, monkeypatch):
    monkeypatch.setattr(MultiHeadAttention, "fused_on_cpu", fused)
    torch.manual_seed(0)
    ours = MultiHeadAttention(D, HEADS).eval()
    reference = copy_into_torch(ours)
    query, memory = torch.randn(2, 5, D), torch.randn(2, 7, D)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    output, weights = ours(query, memory, memory, mask[:, None, None, :], need_weights=need_weights)
    expected, expected_weights = reference(query, memory, memory, key_padding_mask=~mask, average_attn_weights=False)
    torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=1e-5)
        assert (weights[1, :, :, 4:] == 0).all()


def test_causal_self_attention_equals_torch_with_a_causal_mask(fused_on_cpu):
    torch.manual_seed(1)
    ours = MultiHeadAttention(D, HEADS).eval()
    reference = copy_into_torch(ours)
    x = torch.randn(2, 6, D)
    allowed = band(6, 6, 0, causal=True, device=x.device)  # ours: True = may attend
    output, weights = ours(x, x, x, allowed, need_weights=True)
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)  # torch: True = may not attend
    expected, _ = reference(x, x, x, attn_mask=causal)
    torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)
    assert (weights.masked_select(causal) == 0).all()
    fused, _ = ours(x, x, x, allowed)
    torch.testing.assert_close(fused, output, atol=1e-5, rtol=1e-5)


def make_transformer(sample_vocabulary, *overrides):
    cfg = compose_config(*tiny_model_overrides("transformer"), *overrides)
    torch.manual_seed(0)
    return build.model(cfg.model, sample_vocabulary).eval()


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["model.pre_norm=false"],
        ["model.positions=learned"],
        ["model.share_embeddings=false", "model.tie_output=false"],
        ["model.window=1"],
    ],
)
def test_changing_a_future_target_token_changes_no_earlier_output(sample_vocabulary, overrides):
    model = make_transformer(sample_vocabulary, *overrides)
    source = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    target = torch.tensor([[BOS_ID, 11, 12, 13, 14], [BOS_ID, 15, 16, 17, 18]])
    changed = target.clone()
    changed[:, 3] = 20
    with torch.no_grad():
        first, _ = model(source, source != PAD_ID, target)
        second, _ = model(source, source != PAD_ID, changed)
    torch.testing.assert_close(first[:, :3], second[:, :3])
    assert not torch.allclose(first[:, 3:], second[:, 3:])


def test_fused_training_path_equals_explicit_eval_path(sample_vocabulary, fused_on_cpu):
    model = make_transformer(sample_vocabulary, "model.dropout=0.0")
    source = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    target = torch.tensor([[BOS_ID, 11, 12], [BOS_ID, 15, 0]])
    with torch.no_grad():
        explicit, weights = model(source, source != PAD_ID, target)
        model.train()
        fused, no_weights = model(source, source != PAD_ID, target)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    assert weights.shape == (2, 3, 4) and no_weights is None
    assert (weights[1, :, 2:] == 0).all()


def test_decoding_cache_is_allocated_once_and_fills_one_slot_per_step(sample_vocabulary):
    model = make_transformer(sample_vocabulary)
    source = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        state = model.encode(source, source != PAD_ID, max_steps=4)
        assert model.encode(source, source != PAD_ID)["self_keys_0"].shape[2] == 2 * 3 + 10  # the default
        for step in range(3):
            before = state
            _, state, _ = model.decode_step(torch.tensor([BOS_ID]), state)
            keys = state["self_keys_0"]
            assert keys.shape[2] == 4  # the same shape at every step
            assert keys[:, :, step].abs().sum() > 0 and (keys[:, :, step + 1 :] == 0).all()
            assert (before["self_keys_0"][:, :, step] == 0).all()  # the state it was given is unchanged


def test_attention_and_activation_dropout_are_off_by_default_and_on_when_asked(sample_vocabulary):
    default = make_transformer(sample_vocabulary)
    assert isinstance(default.encoder[0].feedforward[2], torch.nn.Identity)
    assert default.decoder[0].cross_attention.dropout == 0.0
    both = make_transformer(sample_vocabulary, "model.attention_dropout=0.2", "model.activation_dropout=0.3")
    assert both.decoder[0].self_attention.dropout == 0.2
    assert both.encoder[0].feedforward[2].p == 0.3


def test_the_band_lets_a_position_see_exactly_its_window():
    assert band(4, 4, 1, False, torch.device("cpu")).int().tolist() == [
        [1, 1, 0, 0],
        [1, 1, 1, 0],
        [0, 1, 1, 1],
        [0, 0, 1, 1],
    ]
    assert band(4, 4, 1, True, torch.device("cpu")).int().tolist() == [
        [1, 0, 0, 0],
        [1, 1, 0, 0],
        [0, 1, 1, 0],
        [0, 0, 1, 1],
    ]
    assert band(1, 5, 2, False, torch.device("cpu")).int().tolist() == [[0, 0, 1, 1, 1]]  # a step: the last query
    assert band(3, 3, 0, False, torch.device("cpu")) is None


def test_sliding_window_self_attention_gives_exactly_zero_outside_the_band_fused_or_not(monkeypatch):
    torch.manual_seed(2)
    ours = MultiHeadAttention(D, HEADS).eval()
    x = torch.randn(2, 7, D)
    padding = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])[:, None, None, :]
    allowed = padding & band(7, 7, 2, False, x.device)  # (B, 1, 7, 7)
    output, weights = ours(x, x, x, allowed, need_weights=True)
    assert (weights.masked_select(~allowed.expand_as(weights)) == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, HEADS, 7))
    # the explicit product written out, one query at a time
    q, k = (ours.split_heads(layer(x)) for layer in (ours.query_projection, ours.key_projection))
    for i in range(7):
        seen = allowed[:, :, i, :].expand(2, HEADS, 7)
        scores = (q[:, :, i, None, :] @ k.transpose(-2, -1))[:, :, 0] / (D // HEADS) ** 0.5
        expected = torch.softmax(scores.masked_fill(~seen, float("-inf")), -1)
        torch.testing.assert_close(weights[:, :, i], expected, atol=1e-6, rtol=1e-5)
    monkeypatch.setattr(MultiHeadAttention, "fused_on_cpu", True)
    fused, _ = ours(x, x, x, allowed)  # F.scaled_dot_product_attention with the band as its mask
    torch.testing.assert_close(fused, output, atol=1e-5, rtol=1e-5)


def test_a_windowed_encoder_is_blind_beyond_its_window(sample_vocabulary):
    """With window 1 and 2 encoder layers a source word reaches 2 positions: changing the last word of a 6-word
    source leaves the encoder's output at the first three words unchanged."""
    model = make_transformer(sample_vocabulary, "model.window=1", "model.encoder_layers=2")
    source = torch.tensor([[5, 6, 7, 8, 9, 10]])
    changed = source.clone()
    changed[0, 5] = 11
    with torch.no_grad():
        first, _ = model.encode_memory(source, source != PAD_ID)
        second, _ = model.encode_memory(changed, changed != PAD_ID)
    torch.testing.assert_close(first[:, :3], second[:, :3])
    assert not torch.allclose(first[:, 4:], second[:, 4:])


@pytest.mark.parametrize(
    "model_name, option, message",
    [
        ("transformer", "model.window=-1", "model.window=-1: must be at least 0"),
        ("luong", "model.window=0", "model.window=0: must be at least 1"),  # Luong's local window has no "off"
        ("luong", "model.attention.normalizer=hardmax", "model.attention.normalizer='hardmax': use one of softmax"),
        ("bahdanau", "model.attention.hard=true", "model.attention.hard='True': use one of none, reinforce, gumbel"),
        ("luong", "model.attention.hard=sampled", "model.attention.hard='sampled': use one of none, reinforce"),
        ("luong", "model.attention.temperature=-1", "model.attention.temperature=-1.0: must be above 0"),
    ],
)
def test_window_and_normalizer_values_that_make_no_sense_are_refused_naming_the_option(
    sample_vocabulary, model_name, option, message
):
    from nmt import UserError

    cfg = compose_config(*tiny_model_overrides(model_name), option)
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        build.model(cfg.model, sample_vocabulary)


@pytest.mark.parametrize("fused", [False, True])
def test_causal_without_a_mask_equals_the_causal_mask(fused, monkeypatch):
    monkeypatch.setattr(MultiHeadAttention, "fused_on_cpu", fused)
    torch.manual_seed(2)
    ours = MultiHeadAttention(D, HEADS).eval()
    x = torch.randn(2, 5, D)
    masked, _ = ours(x, x, x, band(5, 5, 0, causal=True, device=x.device))
    causal, _ = ours(x, x, x, None, causal=True)
    torch.testing.assert_close(causal, masked, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="not both"):
        ours(x, x, x, band(5, 5, 0, causal=True, device=x.device), causal=True)


def test_training_gives_the_fused_kernel_causal_self_attention_without_a_mask(
    sample_vocabulary, fused_on_cpu, monkeypatch
):
    """On a GPU a mask tensor keeps SDPA from its flash kernel; the decoder's causal self-attention passes none. And
    SDPA may not choose cuDNN's kernel, which builds a plan for each new batch shape (nmt/models/attention.py), while
    the process's own choice of backends is left as it was."""
    calls, cudnn_allowed = [], []
    original = torch.nn.functional.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        calls.append((attn_mask is None, is_causal))
        cudnn_allowed.append(torch.backends.cuda.cudnn_sdp_enabled())
        return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    model = make_transformer(sample_vocabulary).train()
    source = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    model(source, source != PAD_ID, torch.tensor([[BOS_ID, 11, 12], [BOS_ID, 15, 0]]))
    layers = len(model.decoder)
    assert calls.count((True, True)) == layers  # each decoder layer's self-attention: is_causal, no mask
    assert calls.count((False, False)) == len(model.encoder) + layers  # padding masks: encoder and cross-attention
    assert cudnn_allowed == [False] * len(calls) and torch.backends.cuda.cudnn_sdp_enabled()


def test_the_decoding_cache_keeps_the_dtype_of_the_projections_under_autocast(sample_vocabulary):
    model = make_transformer(sample_vocabulary)
    source = torch.tensor([[5, 6, 7]])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        state = model.encode(source, source != PAD_ID)
        assert state["self_keys_0"].dtype == state["source_keys_0"].dtype == torch.bfloat16
        for _ in range(2):
            _, state, _ = model.decode_step(torch.tensor([BOS_ID]), state)
            assert state["self_keys_0"].dtype == torch.bfloat16 and state["self_values_1"].dtype == torch.bfloat16
