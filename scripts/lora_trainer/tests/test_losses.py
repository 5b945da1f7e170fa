"""The loss functions against values computed by hand (see the comments)."""

import math

import pytest
import torch

from lora_trainer import losses

LN = math.log

# Two samples with old logprobs 0, so r = exp(logp):
#   sample 0: A = +1, r = [1.1, 1.5]        (L = 2)
#   sample 1: A = -2, r = [0.5, 0.9, 1.0]   (L = 3)
# With eps_low = eps_high = 0.2:
#   sample 0: min(r*A, clip(r)*A) = [1.1, 1.2]        -> l = [-1.1, -1.2]   (1.5 clipped high)
#   sample 1: r*A = [-1, -1.8, -2], clip*A = [-1.6, -1.8, -2] -> l = [1.6, 1.8, 2.0] (0.5 clipped low)
# Sums: -2.3 and 5.4; tokens 5.
LOGP = torch.tensor([[LN(1.1), LN(1.5), 50.0], [LN(0.5), LN(0.9), LN(1.0)]])  # 50.0 is padding
OLD = torch.zeros(2, 3)
ADV = torch.tensor([1.0, -2.0])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])


def terms(logp=LOGP, **kw):
    return losses.grpo_token_terms(logp, OLD, ADV, MASK, 0.2, 0.2, **kw)


def full_norm(max_length=3):
    return losses.Normalizer(batch_size=2, total_tokens=5, max_length=max_length)


def test_per_token_surrogate_and_clip_counts():
    t = terms()
    want = torch.tensor([[-1.1, -1.2, 0.0], [1.6, 1.8, 2.0]])
    assert torch.allclose(t.loss, want, atol=1e-6)
    assert (t.clip_low, t.clip_high, t.tokens) == (1, 1, 5)
    assert t.kl_sum == 0.0


@pytest.mark.parametrize(
    "loss_type,max_length,want",
    [
        ("grpo", 3, 0.5 * (-2.3 / 2 + 5.4 / 3)),  # 0.325
        ("bnpo", 3, 3.1 / 5),  # 0.62
        ("dapo", 3, 3.1 / 5),
        ("dr_grpo", 3, 3.1 / (2 * 3)),  # L_max = longest sample
        ("dr_grpo", 10, 3.1 / (2 * 10)),  # L_max from the request
    ],
)
def test_aggregation(loss_type, max_length, want):
    t = terms()
    got = losses.aggregate(loss_type, t.loss, MASK, full_norm(max_length))
    assert float(got) == pytest.approx(want, abs=1e-6)


def test_unknown_loss_type():
    with pytest.raises(ValueError, match="unknown loss type"):
        losses.aggregate("ppo", terms().loss, MASK, full_norm())


def test_gradient_flows_only_through_unclipped_tokens():
    # grpo weights: sample 0 tokens 1/(2*2), sample 1 tokens 1/(2*3).
    # dl/dlogp = -r*A*weight where the unclipped term is the minimum, 0 where clipped.
    logp = LOGP.clone().requires_grad_(True)
    t = terms(logp)
    losses.aggregate("grpo", t.loss, MASK, full_norm()).backward()
    want = torch.tensor([[-1.1 / 4, 0.0, 0.0], [0.0, 0.9 * 2 / 6, 1.0 * 2 / 6]])
    assert torch.allclose(logp.grad, want, atol=1e-6)


def test_k3_kl_term():
    # One token, r = 1 (logp = old), A = 0, so l = beta * kl.
    # ref - logp = ln 2  -> kl = 2 - ln 2 - 1 = 0.3068528...
    # ref - logp = -ln 2 -> kl = 0.5 + ln 2 - 1 = 0.1931471...
    logp = torch.tensor([[-1.0, -1.0]])
    ref = torch.tensor([[-1.0 + LN(2), -1.0 - LN(2)]])
    mask = torch.ones(1, 2)
    t = losses.grpo_token_terms(logp, logp.clone(), torch.tensor([0.0]), mask, 0.2, 0.2, kl_coef=0.1, ref_logp=ref)
    kl = [1 - LN(2), LN(2) - 0.5]
    assert t.kl_sum == pytest.approx(sum(kl), abs=1e-6)
    assert torch.allclose(t.loss, 0.1 * torch.tensor([kl]), atol=1e-6)
    # kl_coef 0 keeps the KL out of the loss but still measures it.
    t0 = losses.grpo_token_terms(logp, logp.clone(), torch.tensor([0.0]), mask, 0.2, 0.2, kl_coef=0.0, ref_logp=ref)
    assert torch.all(t0.loss == 0)
    assert t0.kl_sum == pytest.approx(sum(kl), abs=1e-6)


def test_asymmetric_clip():
    # eps_low = 0.2, eps_high = 0.28 (DAPO's clip-higher): r = 1.25 with A > 0 is
    # inside [0.8, 1.28] so not clipped; r = 1.3 is.
    logp = torch.tensor([[LN(1.25), LN(1.3)]])
    t = losses.grpo_token_terms(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), 0.2, 0.28)
    assert torch.allclose(t.loss, torch.tensor([[-1.25, -1.28]]), atol=1e-6)
    assert (t.clip_low, t.clip_high) == (0, 1)


def test_micro_batches_add_up():
    # grpo, dapo and dr_grpo: the shares of the micro-batches sum to the full-batch loss.
    full = terms()
    parts = [
        losses.grpo_token_terms(LOGP[i : i + 1], OLD[i : i + 1], ADV[i : i + 1], MASK[i : i + 1], 0.2, 0.2) for i in (0, 1)
    ]
    norm = losses.Normalizer(batch_size=2, total_tokens=5, max_length=3, micro_batches=2)
    for lt in ("grpo", "dapo", "dr_grpo"):
        whole = float(losses.aggregate(lt, full.loss, MASK, full_norm()))
        split = sum(float(losses.aggregate(lt, p.loss, MASK[i : i + 1], norm)) for i, p in enumerate(parts))
        assert split == pytest.approx(whole, abs=1e-6), lt
    # bnpo normalizes each micro-batch by its own tokens and averages them:
    # (1/2) * (-2.3/2 + 5.4/3) = 0.325, not dapo's 0.62.
    split = sum(float(losses.aggregate("bnpo", p.loss, MASK[i : i + 1], norm)) for i, p in enumerate(parts))
    assert split == pytest.approx(0.325, abs=1e-6)


def test_empty_sample_counts_in_batch_size():
    # Sample 1 has no tokens: grpo = (1/2) * (-(1.1 + 1.2)/2) = -0.575.
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    t = losses.grpo_token_terms(LOGP, OLD, ADV, mask, 0.2, 0.2)
    norm = losses.Normalizer(batch_size=2, total_tokens=2, max_length=2)
    assert float(losses.aggregate("grpo", t.loss, mask, norm)) == pytest.approx(-0.575, abs=1e-6)
    assert float(losses.aggregate("dr_grpo", t.loss, mask, norm)) == pytest.approx(-2.3 / 4, abs=1e-6)


def test_token_logprobs_with_temperature():
    # logits [0, 2 ln 3] at T = 2 are [0, ln 3]: p = [1/4, 3/4].
    logits = torch.tensor([[[0.0, 2 * LN(3)]]])
    got = losses.token_logprobs(logits.expand(1, 2, 2), torch.tensor([[0, 1]]), temperature=2.0)
    assert torch.allclose(got, torch.tensor([[LN(0.25), LN(0.75)]]), atol=1e-6)
    got1 = losses.token_logprobs(logits, torch.tensor([[1]]))
    assert float(got1) == pytest.approx(LN(0.9), abs=1e-6)  # p = 9/10 at T = 1


def test_entropy():
    uniform = torch.zeros(1, 1, 4)
    assert float(losses.entropy(uniform)) == pytest.approx(LN(4), abs=1e-6)
    # [0, ln 3]: p = [1/4, 3/4], H = -(1/4 ln 1/4 + 3/4 ln 3/4)
    h = -(0.25 * LN(0.25) + 0.75 * LN(0.75))
    assert float(losses.entropy(torch.tensor([[[0.0, 2 * LN(3)]]]), temperature=2.0)) == pytest.approx(h, abs=1e-6)


def test_sft_nll_masks_prompt_and_padding():
    # Vocabulary of 3, logits [0, 0, ln 2] -> p = [1/4, 1/4, 1/2].
    # Targets [2, 0, 1] with mask [1, 1, 0]: NLL = ln 2 + ln 4 = 3 ln 2.
    logits = torch.tensor([[0.0, 0.0, LN(2)]]).expand(3, 3).unsqueeze(0)
    got = losses.sft_nll_sum(logits, torch.tensor([[2, 0, 1]]), torch.tensor([[1.0, 1.0, 0.0]]))
    assert float(got) == pytest.approx(3 * LN(2), abs=1e-6)


# Dual clip (verl's clip_ratio_c): sample 1 (A = -2) with r = [0.5, 1.1, 1.6]
# has per-token losses [1.6 (clipped low), 2.2, 3.2]; c = 1.3 caps them at
# -c*A = 2.6, so 3.2 becomes 2.6 and loses its gradient.
def test_dual_clip_caps_negative_advantage_losses():
    logp = torch.tensor([[LN(1.1), LN(1.5), 50.0], [LN(0.5), LN(1.1), LN(1.6)]], requires_grad=True)
    t = losses.grpo_token_terms(logp, OLD, ADV, MASK, 0.2, 0.2, clip_ratio_c=1.3)
    want = torch.tensor([[-1.1, -1.2, 0.0], [1.6, 2.2, 2.6]])
    assert torch.allclose(t.loss, want, atol=1e-6)
    assert (t.clip_dual, t.clip_low, t.clip_high) == (1, 1, 1)
    (t.loss * MASK).sum().backward()
    # d(-r*A)/dlogp = -r*A: sample 1 token 1 -> 2.2; the capped token -> 0; clipped ones -> 0.
    assert torch.allclose(logp.grad, torch.tensor([[-1.1, 0.0, 0.0], [0.0, 2.2, 0.0]]), atol=1e-6)
    # verl's default c = 3: cap 6, nothing capped.
    t3 = losses.grpo_token_terms(logp.detach(), OLD, ADV, MASK, 0.2, 0.2, clip_ratio_c=3.0)
    assert t3.clip_dual == 0 and torch.allclose(t3.loss[1], torch.tensor([1.6, 2.2, 3.2]), atol=1e-6)


# low_var_kl: k3 of d = pi_ref - pi, clamped to [-10, 10] (d itself to [-20, 20]).
# d = 2: e^2 - 3 = 4.389 (kept; dk3/dpi = 1 - e^2); d = 3: e^3 - 4 = 16.09 -> 10;
# d = -12: e^-12 + 11 -> 10; both clamped tokens have no gradient.
def test_low_var_kl_clamps_like_verl():
    logp = torch.zeros(1, 3, dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[2.0, 3.0, -12.0]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.float64)
    adv = torch.zeros(1, dtype=torch.float64)
    old = torch.zeros(1, 3, dtype=torch.float64)
    t = losses.grpo_token_terms(logp, old, adv, mask, 0.2, 0.2, kl_coef=1.0, ref_logp=ref, kl_estimator="low_var_kl")
    assert t.kl_sum == pytest.approx(math.exp(2) - 3 + 10 + 10, rel=1e-12)
    t.loss.sum().backward()
    assert logp.grad[0].tolist() == pytest.approx([1 - math.exp(2), 0.0, 0.0], rel=1e-12)
    k3 = losses.grpo_token_terms(logp.detach(), old, adv, mask, 0.2, 0.2, kl_coef=1.0, ref_logp=ref)
    assert k3.kl_sum == pytest.approx(math.exp(2) - 3 + math.exp(3) - 4 + math.exp(-12) + 11, rel=1e-12)


def test_logprobs_and_entropy_keep_float64_and_widen_half_precision():
    """At least float32: a float64 model's logprobs are not narrowed (that made
    data-parallel float64 runs differ by float32 rounding), half precision is
    widened as before."""
    logits = torch.randn(2, 3, 5, dtype=torch.float64)
    targets = torch.zeros(2, 3, dtype=torch.long)
    assert losses.token_logprobs(logits, targets).dtype == torch.float64
    assert losses.entropy(logits).dtype == torch.float64
    assert losses.token_logprobs(logits.to(torch.bfloat16), targets).dtype == torch.float32
    assert losses.entropy(logits.to(torch.float16)).dtype == torch.float32
    # The float64 result is a hand computation's in float64.
    lp = losses.token_logprobs(logits, targets)
    want = logits[..., 0] - torch.logsumexp(logits, -1)
    assert torch.equal(lp, want) or float((lp - want).abs().max()) < 1e-12
