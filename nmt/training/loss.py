"""The training loss: the output layer and label-smoothed cross-entropy fused, a few hundred rows at a time.

Written the plain way, `F.cross_entropy(output(features).float(), ...)` holds the (tokens, vocabulary) logits in
fp32 several times over (logits, log-probabilities, their gradient, the smoothing term): for 4,000 target tokens and
8,000 subwords that is 128 MB per copy, and on a CPU the step spends over half its time moving those arrays rather
than in the model. Here each chunk of rows goes through W x + b, log-sum-exp and the gradient while it is still in
cache, and only the loss, the gradient of the features and the gradient of W and b leave the function (the approach of
fused linear-cross-entropy kernels such as Liger's). The gradient is computed in the forward pass, since the loss is
the last node of the graph; backward only scales it.

With smoothing eps over V classes (the target gets 1 - eps + eps/V, as in `F.cross_entropy(label_smoothing=eps)`):
    loss_i = logsumexp(z_i) - (1 - eps) z_i[y_i] - eps mean(z_i)
    d loss_i / d z_i = softmax(z_i) - (1 - eps) 1[y_i] - eps/V
"""

import torch

from nmt.device import autocast
from nmt.text.data import PAD_ID

# Logits per chunk: on a CPU 2M floats (8 MB, a few hundred rows of an 8k vocabulary), to stay near its caches; on a
# GPU 64M (256 MB), so that each product is large enough to fill it and the chunks' loop stays short
CHUNK_ELEMENTS = {"cpu": 1 << 21, "cuda": 1 << 26}


def add_chunk_gradients(grads, chunk: slice, p, x_chunk, w, y, smoothing: float, weights) -> None:
    """One chunk's share of the gradients (grad_x, grad_w, grad_b) of the fused loss, from its probabilities `p`.

    d/dz = p - (1 - eps) 1[y] - eps/V: the products take p alone; the two sparse or constant terms are added after
    them in fp32, which keeps them exact and saves two passes over the (n, V) block. A row's weight (`weights`, or
    None) scales its row of d/dz: its row of grad_x, and its features in grad_w and grad_b."""
    grad_x, grad_w, grad_b = grads
    grad_x[chunk] = torch.mm(p, w).float() - (1.0 - smoothing) * w[y].float()
    if weights is not None:
        grad_x[chunk] *= weights[:, None]
        x_chunk = x_chunk * weights[:, None].to(x_chunk.dtype)
    grad_w += (p.t() @ x_chunk).float()
    grad_w.index_add_(0, y, x_chunk.float(), alpha=smoothing - 1.0)
    if weights is None:
        grad_b += p.sum(dim=0, dtype=torch.float32)
        grad_b.index_add_(0, y, torch.full((len(x_chunk),), smoothing - 1.0, device=x_chunk.device))
    else:
        grad_b += (p.t() @ weights.to(p.dtype)).float()
        grad_b.index_add_(0, y, weights, alpha=smoothing - 1.0)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, features, weight, bias, target, smoothing, dtype, row_weights):
        # features (N, H), weight (V, H), bias (V,) or None, target (N,) without padding, or with it and row_weights
        # (N,) fp32 that give padding rows 0 (the static shapes of a captured update, nmt.training.update)
        rows, vocab = features.shape[0], weight.shape[0]
        x, w = features.to(dtype), weight.to(dtype)
        b = bias.to(dtype) if bias is not None else None
        needs_grad = any(ctx.needs_input_grad[:3])
        total = torch.zeros((), dtype=torch.float32, device=x.device)
        token_loss = torch.empty(rows, dtype=torch.float32, device=x.device)  # -log p(y_i), without smoothing
        step = max(1, CHUNK_ELEMENTS.get(x.device.type, CHUNK_ELEMENTS["cpu"]) // vocab)
        if needs_grad:
            grad_x = torch.empty(x.shape, dtype=torch.float32, device=x.device)
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=x.device)
            grad_b = torch.zeros(vocab, dtype=torch.float32, device=x.device)
            probabilities = torch.empty(min(step, rows), vocab, dtype=dtype, device=x.device)
        for start in range(0, rows, step):
            chunk = slice(start, start + step)
            x_chunk, y = x[chunk], target[chunk, None]  # (n, H), (n, 1)
            z = torch.addmm(b, x_chunk, w.t()) if b is not None else x_chunk @ w.t()  # (n, V)
            log_p = torch.log_softmax(z.float(), dim=1)  # (n, V) fp32; faster than dtype=float32 on CPU
            target_log_p = log_p.gather(1, y)  # (n, 1)
            token_loss[chunk] = -target_log_p[:, 0]
            weights = None if row_weights is None else row_weights[chunk]
            if weights is None:
                total -= (1.0 - smoothing) * target_log_p.sum() + smoothing * log_p.mean(dim=1).sum()
            else:
                total -= weights @ ((1.0 - smoothing) * target_log_p[:, 0] + smoothing * log_p.mean(dim=1))
            if not needs_grad:
                continue
            p = torch.exp(log_p, out=probabilities[: len(x_chunk)])  # (n, V) in the matmul dtype
            add_chunk_gradients((grad_x, grad_w, grad_b), chunk, p, x_chunk, w, y[:, 0], smoothing, weights)
        if needs_grad and smoothing:
            smooth(grad_x, grad_w, grad_b, w, x, smoothing / vocab, row_weights)
        if not needs_grad:
            grad_x = grad_w = grad_b = None
        elif bias is None:
            grad_b = None
        ctx.save_for_backward(grad_x, grad_w, grad_b)
        ctx.dtypes = (features.dtype, weight.dtype, bias.dtype if bias is not None else None)
        ctx.mark_non_differentiable(token_loss)
        return total, token_loss

    @staticmethod
    def backward(ctx, grad_total, grad_token_loss):
        grad_x, grad_w, grad_b = ctx.saved_tensors
        features_dtype, weight_dtype, bias_dtype = ctx.dtypes
        scale = grad_total.float()
        return (
            (grad_x * scale).to(features_dtype),  # grad_x is fp32 already
            (grad_w * scale).to(weight_dtype),
            (grad_b * scale).to(bias_dtype) if grad_b is not None else None,
            None,
            None,
            None,
            None,
        )


def smooth(grad_x, grad_w, grad_b, w, x, share: float, row_weights: torch.Tensor | None) -> None:
    """The smoothing term's constant part of d/dz, -eps/V on every class of every row (weighted by row), added to
    the gradients after the chunks' products."""
    if row_weights is None:
        grad_x -= share * w.float().sum(dim=0)
        grad_w -= share * x.float().sum(dim=0)
        grad_b -= share * x.shape[0]
    else:
        grad_x -= share * row_weights[:, None] * w.float().sum(dim=0)
        grad_w -= share * (row_weights @ x.float())
        grad_b -= share * row_weights.sum()


def linear_cross_entropy(
    features: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    smoothing: float = 0.0,
    dtype: torch.dtype | None = None,
    per_token: bool = False,
    row_weights: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy of `features @ weight.T + bias` against `target`: a scalar (fp32); with
    `per_token`, also each row's -log p(target) without smoothing (N,), fp32 and without gradient.

    features (N, H), weight (V, H), bias (V,) or None, target (N,) class ids (padding already removed, or kept and
    given weight 0 in `row_weights` (N,), fp32: the sum is then weighted, value and gradient). The matrix
    products run in `dtype` (bf16 or fp16 under mixed precision; default: the features' dtype), the softmax and the
    sums in fp32. Equals `F.cross_entropy(F.linear(features, weight, bias).float(), target, reduction="sum",
    label_smoothing=smoothing)` in value and gradient.
    """
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"label smoothing must be in [0, 1), got {smoothing}")
    if not torch.is_grad_enabled():  # validation: a Function still sees requires_grad under no_grad, and would form
        features, weight = features.detach(), weight.detach()  # the gradients (twice the products of the loss)
        bias = bias.detach() if bias is not None else None
    total, token_loss = _LinearCrossEntropy.apply(
        features, weight, bias, target, smoothing, dtype or features.dtype, row_weights
    )
    return (total, token_loss) if per_token else total


def batch_loss(model, features_of, batch, smoothing: float, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Summed cross-entropy of a batch's real target tokens: `features_of` (the model's `features`, or a DDP wrapper
    of it) under autocast, then the model's output layer and the loss fused, so the (tokens, vocabulary) logits are
    never held whole. In training, plus the model's `attention_loss` where it has one (hard attention trained by
    REINFORCE, whose value is zero: the figure stays the cross-entropy)."""
    with autocast(device, dtype):
        # (B, T, F), (B, T, S); the source lengths from the CPU side of the batch
        features, attention = features_of(batch.source, batch.source_mask, batch.target_in, batch.source_lengths)
    real = batch.target_out != PAD_ID  # (B, T)
    output = model.output
    if batch.token_weights is None:
        positions = batch.target_positions  # real tokens, found on the CPU: no host sync here
        features, target, weights = features.flatten(0, 1).index_select(0, positions), batch.target_out.flatten(), None
        target = target.index_select(0, positions)
    else:  # a batch of static shape: every position, padding weighted 0 (no size that depends on the data)
        features, target, weights = features.flatten(0, 1), batch.target_out.flatten(), batch.token_weights
    loss, token_loss = linear_cross_entropy(
        features, output.weight, output.bias, target, smoothing, dtype, per_token=True, row_weights=weights
    )
    if attention is not None and attention.requires_grad:
        if weights is None:
            token_loss = torch.zeros(real.shape, device=real.device).masked_scatter(real, token_loss)  # (B, T)
        else:
            token_loss = (token_loss * weights).view(real.shape)
        policy = model.attention_loss(attention, real, token_loss)
        if policy is not None:
            loss = loss + policy
    return loss
