"""Loss functions of the trainer protocol (trainer/PROTOCOL.md, grpo_step and sft_step).

Pure tensor functions, independent of any model, so they can be tested against
hand-computed values. Shapes: B samples, T = the longest completion in the
(micro-)batch; `mask` is 1.0 on real completion tokens and 0.0 on padding.

For sample i with tokens t, advantage A_i, length L_i (PROTOCOL.md):

    r      = exp(pi - pi_old)
    p_it   = -min(r*A_i, clip(r, 1-eps_low, 1+eps_high)*A_i)
    p_it   = min(p_it, -c*A_i)   if c = clip_ratio_c > 0 and A_i < 0   (dual clip, verl)
    l_it   = p_it + beta*kl_it
    d      = pi_ref - pi
    kl_it  = exp(d) - d - 1                                        (k3, >= 0)
    kl_it  = clamp(exp(d') - d' - 1, -10, 10), d' = clamp(d, -20, 20)   (low_var_kl, verl)

    grpo    : L = (1/B) sum_i (1/max(L_i,1)) sum_t l_it
    bnpo    : L = sum_i sum_t l_it / max(sum_i L_i, 1)      (per micro-batch)
    dapo    : L = sum_i sum_t l_it / max(sum_i L_i, 1)      (whole request)
    dr_grpo : L = sum_i sum_t l_it / (B * L_max)
"""

from dataclasses import dataclass
from typing import Optional

import torch

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")
KL_ESTIMATORS = ("k3", "low_var_kl")


@dataclass
class TokenTerms:
    """Per-token loss and the sums the step metrics are made of."""

    loss: torch.Tensor  # [B, T] l_it, zero on padding
    kl_sum: float  # sum of kl_it over real tokens (0 when no reference)
    clip_low: int  # tokens with r < 1-eps_low and A < 0
    clip_high: int  # tokens with r > 1+eps_high and A > 0
    tokens: int  # real tokens
    clip_dual: int = 0  # tokens whose loss the dual clip capped


def grpo_token_terms(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    kl_coef: float = 0.0,
    ref_logp: Optional[torch.Tensor] = None,
    clip_ratio_c: float = 0.0,
    kl_estimator: str = "k3",
) -> TokenTerms:
    """The per-token clipped surrogate (dual-clipped for A < 0 when clip_ratio_c > 0),
    plus beta * KL (k3 or low_var_kl) when a reference is given.

    logp carries the gradient; old_logp, advantages ([B]) and ref_logp are constants.
    """
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype).unsqueeze(-1)  # broadcast over the sample's tokens
    # Padding positions may hold arbitrary values; zero the exponent there so
    # an overflow on padding can never turn the masked sum into NaN.
    delta = (logp - old_logp) * mask
    ratio = torch.exp(delta)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    surrogate = torch.min(ratio * adv, clipped * adv)
    loss = -surrogate
    dual = torch.zeros_like(loss, dtype=torch.bool)
    if clip_ratio_c > 0:
        # verl's dual clip: cap a negative-advantage token's loss at -c*A (no gradient there).
        cap = -clip_ratio_c * adv
        dual = (adv < 0) & (loss > cap)
        loss = torch.where(adv < 0, torch.min(loss, cap.expand_as(loss)), loss)
    kl_sum = 0.0
    if ref_logp is not None:
        d = (ref_logp - logp) * mask
        if kl_estimator == "low_var_kl":
            d = torch.clamp(d, min=-20.0, max=20.0)
            kl = torch.clamp(torch.exp(d) - d - 1.0, min=-10.0, max=10.0)
        else:
            kl = torch.exp(d) - d - 1.0
        if kl_coef != 0.0:
            loss = loss + kl_coef * kl
        kl_sum = float((kl.detach() * mask).sum())
    loss = loss * mask
    with torch.no_grad():
        real = mask > 0
        low = ((ratio < 1.0 - clip_low) & (adv < 0) & real).sum()
        high = ((ratio > 1.0 + clip_high) & (adv > 0) & real).sum()
        capped = (dual & real).sum()
    return TokenTerms(
        loss=loss,
        kl_sum=kl_sum,
        clip_low=int(low),
        clip_high=int(high),
        tokens=int(mask.sum()),
        clip_dual=int(capped),
    )


@dataclass
class Normalizer:
    """The whole request's sizes, so that micro-batches add up to the full-batch loss."""

    batch_size: int  # B of the request
    total_tokens: int  # sum_i L_i of the request
    max_length: int  # L_max of dr_grpo
    micro_batches: int = 1  # number of micro-batches the request is split into


def aggregate(loss_type: str, token_loss: torch.Tensor, mask: torch.Tensor, norm: Normalizer) -> torch.Tensor:
    """This micro-batch's share of L: summing it over the micro-batches gives L.

    For grpo, dapo and dr_grpo the sum over micro-batches equals the
    full-batch loss exactly. bnpo normalizes each micro-batch by its own
    tokens and averages over micro-batches (as gradient accumulation does),
    so it equals dapo only when the request is not split.
    """
    mask = mask.to(token_loss.dtype)
    if loss_type == "grpo":
        lengths = mask.sum(-1).clamp(min=1.0)
        return ((token_loss * mask).sum(-1) / lengths).sum() / norm.batch_size
    if loss_type == "dapo":
        return (token_loss * mask).sum() / max(norm.total_tokens, 1)
    if loss_type == "bnpo":
        return (token_loss * mask).sum() / mask.sum().clamp(min=1.0) / norm.micro_batches
    if loss_type == "dr_grpo":
        return (token_loss * mask).sum() / (norm.batch_size * max(norm.max_length, 1))
    raise ValueError(f"unknown loss type {loss_type!r}")


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T)[target] per position, computed in float32 (float64 for a float64 model).

    logits [B, T, V] are the predictions for targets [B, T] (already shifted).
    Targets on padding may be any valid id; the caller masks them.
    """
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # at least float32
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    picked = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - logz


def entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy (nats) of softmax(logits / T) at every position, [B, T]."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # at least float32
    if temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def sft_nll_sum(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of the negative log-likelihood over supervised (mask = 1) tokens.

    The protocol's SFT loss is this sum divided by the batch's supervised
    tokens; the caller divides by the whole request's count so micro-batches
    add up to the mean.
    """
    nll = -token_logprobs(logits, targets)
    return (nll * mask.to(nll.dtype)).sum()
