"""The engine on the tiny backend: sampling, scoring, updates, save/load."""

import copy
import math

import pytest
import torch

from lora_trainer import losses, protocol
from lora_trainer.engine import Engine, Limits, NumericError
from lora_trainer.tiny import BOS_ID, EOS_ID, ByteTokenizer

from .helpers import prompt_ids, tiny_engine

# The server's defaults (grpo, clip 0.2/0.2, no KL, mu 1, T 1, no gradient clipping) with lr 0.05.
LOSS = protocol.parse_loss({"learning_rate": 0.05})


def unbatched_logprobs(engine: Engine, prompt, completion, temperature=1.0):
    """Independent of the engine's batching: one unpadded sequence, positions 0..n-1."""
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logits, _ = engine.backend.forward(ids, torch.ones_like(ids), torch.arange(ids.shape[1]).unsqueeze(0))
        lp = torch.log_softmax(logits[0].float() / temperature, dim=-1)
    return [float(lp[len(prompt) - 1 + t, tok]) for t, tok in enumerate(completion)]


def unbatched_entropy(engine: Engine, prompt, completion):
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logits, _ = engine.backend.forward(ids, torch.ones_like(ids), torch.arange(ids.shape[1]).unsqueeze(0))
        lp = torch.log_softmax(logits[0].float(), dim=-1)
    h = -(lp.exp() * lp).sum(-1)
    return [float(h[len(prompt) - 1 + t]) for t in range(len(completion))]


def test_byte_tokenizer():
    tok = ByteTokenizer()
    assert tok.encode("hé") == [104, 195, 169]
    assert tok.decode(tok.encode("hé")) == "hé"
    assert tok.encode_prompt("hi", None) == [BOS_ID, 104, 105]
    chat = tok.encode_prompt("", [{"role": "user", "content": "hi"}])
    assert tok.decode(chat[1:]) == "user: hi\nassistant: "
    assert tok.decode([104, EOS_ID, 105]) == "hi"


def test_prompt_falls_back_to_dialogue():
    e = tiny_engine()
    p = {"text": "", "messages": [], "dialogue": {"history": [{"role": "user", "content": "a"}], "question": "b"}}
    assert e.tok.decode(e.encode_prompt(p, "x")[1:]) == "user: a\nuser: b\nassistant: "


def test_dialogue_memories_are_accepted_and_ignored():
    # data.prompt.memories sends dialogue.memories; an LLM endpoint tokenizes
    # the prompt exactly as without them.
    from lora_trainer import protocol

    e = tiny_engine()
    d = {"history": [{"role": "user", "content": "a"}], "question": "b"}
    with_mem = protocol.prompt({"text": "", "dialogue": dict(d, memories=[{"id": "f1", "text": "I live in Crete", "score": 0.8}])}, "p")
    without = protocol.prompt({"text": "", "dialogue": d}, "p")
    assert e.encode_prompt(with_mem, "x") == e.encode_prompt(without, "x")


def test_adapter_starts_as_the_base_model():
    e = tiny_engine()
    p, c = prompt_ids(e, "hello"), [1, 2, 3]
    with_adapter = unbatched_logprobs(e, p, c)
    with e.backend.adapter_disabled():
        without = unbatched_logprobs(e, p, c)
    assert with_adapter == without


def test_sampling_is_seeded_and_logprobs_match_an_unbatched_forward():
    e = tiny_engine()
    prompts = [prompt_ids(e, "a short prompt"), prompt_ids(e, "x")]  # different lengths: left padding
    a = e.sample(prompts, 3, 1.0, 1.0, 6, [], seed=7)
    b = e.sample(prompts, 3, 1.0, 1.0, 6, [], seed=7)
    c = e.sample(prompts, 3, 1.0, 1.0, 6, [], seed=8)
    assert a == b
    assert [s["token_ids"] for s in a] != [s["token_ids"] for s in c]
    assert [(s["prompt_index"], s["sample_index"]) for s in a] == [(i, j) for i in range(2) for j in range(3)]
    for s in a:
        assert len(s["token_ids"]) == len(s["logprobs"]) == 6
        assert s["finish_reason"] == "length" and s["policy_version"] == 0
        want = unbatched_logprobs(e, prompts[s["prompt_index"]], s["token_ids"])
        assert s["logprobs"] == pytest.approx(want, abs=1e-5)
        assert all(lp <= 0 for lp in s["logprobs"])


def test_sample_of_a_prompt_does_not_depend_on_the_other_prompts():
    e = tiny_engine()
    p0, p1 = prompt_ids(e, "first"), prompt_ids(e, "second prompt")
    both = e.sample([p0, p1], 2, 1.0, 1.0, 5, [], seed=3)
    alone = e.sample([p0], 2, 1.0, 1.0, 5, [], seed=3)
    assert [s["token_ids"] for s in both[:2]] == [s["token_ids"] for s in alone]


def test_temperature_scales_the_reported_logprobs():
    e = tiny_engine()
    p = prompt_ids(e, "hot")
    s = e.sample([p], 1, 2.0, 1.0, 4, [], seed=1)[0]
    assert s["logprobs"] == pytest.approx(unbatched_logprobs(e, p, s["token_ids"], temperature=2.0), abs=1e-5)


def test_greedy_follows_the_argmax():
    e = tiny_engine()
    p = prompt_ids(e, "greedy")
    s = e.sample([p], 2, 0.0, 1.0, 5, [], seed=1)
    assert s[0]["token_ids"] == s[1]["token_ids"]
    seq = list(p)
    for _ in range(5):
        ids = torch.tensor([seq])
        with torch.no_grad():
            logits, _ = e.backend.forward(ids, torch.ones_like(ids), torch.arange(len(seq)).unsqueeze(0))
        seq.append(int(logits[0, -1].argmax()))
    assert s[0]["token_ids"] == seq[len(p):]
    # T = 0 reports logprobs under T = 1.
    assert s[0]["logprobs"] == pytest.approx(unbatched_logprobs(e, p, s[0]["token_ids"]), abs=1e-5)


def test_choose_draws_from_the_top_p_truncated_distribution():
    # p = [0.5, 0.3, 0.2]. top_p = 1: frequencies follow p. top_p = 0.6: the
    # smallest prefix with mass >= 0.6 is {0, 1}, renormalized [0.625, 0.375].
    # top_p = 0.5: token 0 alone.
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]])).expand(4000, 3)
    gens = [torch.Generator().manual_seed(k) for k in range(4000)]
    for top_p, want in ((1.0, [0.5, 0.3, 0.2]), (0.6, [0.625, 0.375, 0.0]), (0.5, [1.0, 0.0, 0.0])):
        draws = Engine._choose(logits, 1.0, top_p, gens)
        freq = torch.bincount(draws, minlength=3).double() / 4000
        # 4 standard errors of a proportion over 4000 draws is < 0.032.
        assert freq.tolist() == pytest.approx(want, abs=0.032), top_p


def test_stop_string_truncates_text():
    e = tiny_engine()
    p = prompt_ids(e, "stop here")
    free = e.sample([p], 1, 1.0, 1.0, 16, [], seed=0)[0]
    ids = free["token_ids"]
    # A stop string made of two consecutive ASCII tokens of the free sample (after the first token).
    k = next(k for k in range(1, len(ids) - 1) if ids[k] < 128 and ids[k + 1] < 128)
    stop = chr(ids[k]) + chr(ids[k + 1])
    cut = free["text"].find(stop)
    s = e.sample([p], 1, 1.0, 1.0, 16, [stop], seed=0)[0]
    assert s["finish_reason"] == "stop"
    assert s["text"] == free["text"][:cut]
    # The tokens run up to the one that completed the stop string.
    assert s["token_ids"] == ids[: len(s["token_ids"])]
    assert stop in e.tok.decode(s["token_ids"]) and stop not in e.tok.decode(s["token_ids"][:-1])
    assert len(s["logprobs"]) == len(s["token_ids"])


def test_sft_learns_and_eos_ends_a_sample():
    # SFT on the empty completion teaches "EOS first"; greedy then stops at once.
    e = tiny_engine()
    p = prompt_ids(e, "q")
    # The loss of the first call is the loss before any update: -log p(EOS | prompt).
    first_want = -unbatched_logprobs(e, p, [EOS_ID])[0]
    first = None
    for k in range(40):
        out = e.sft_step([(p, [])], learning_rate=0.05, epochs=1, max_grad_norm=1.0)
        first = out["loss"] if first is None else first
        assert out["tokens"] == 1
    assert e.policy_version == 40
    assert first == pytest.approx(first_want, abs=1e-5)
    assert first > 4 and out["loss"] < 1.5  # p(EOS) from ~1/259 to > 0.2
    s = e.sample([p], 1, 0.0, 1.0, 8, [], seed=0)[0]
    assert s["token_ids"] == [] and s["finish_reason"] == "stop" and s["policy_version"] == 40


def test_sft_loss_is_the_token_mean_nll():
    e = tiny_engine()
    p1, p2 = prompt_ids(e, "one"), prompt_ids(e, "prompt two")
    c1, c2 = e.tok.encode("ab"), e.tok.encode("xyz")
    nll = -sum(unbatched_logprobs(e, p1, c1 + [EOS_ID])) - sum(unbatched_logprobs(e, p2, c2 + [EOS_ID]))
    out = e.sft_step([(p1, c1), (p2, c2)], learning_rate=0.01, epochs=1, max_grad_norm=0.0)
    assert out["tokens"] == 7
    assert out["loss"] == pytest.approx(nll / 7, abs=1e-5)


def on_policy_batch(e, n=2, advantages=(1.5, -0.5), max_tokens=(3, 5)):
    samples = []
    for k in range(n):
        p = prompt_ids(e, f"prompt {k}")
        s = e.sample([p], 1, 1.0, 1.0, max_tokens[k], [], seed=k)[0]
        samples.append({"prompt_ids": p, "token_ids": s["token_ids"], "old_logprobs": s["logprobs"], "advantage": advantages[k]})
    return samples


def test_grpo_first_iteration_metrics_on_policy():
    # On-policy r = 1, so l_it = -A_i (+ beta*kl with kl = 0: the adapter starts at zero).
    # grpo: -(1.5 - 0.5)/2 = -0.5. dr_grpo: -(1.5*3 - 0.5*5)/(2*5) = -0.2.
    # dapo: -(1.5*3 - 0.5*5)/8 = -0.25.
    for loss_type, want in (("grpo", -0.5), ("dr_grpo", -0.2), ("dapo", -0.25), ("bnpo", -0.25)):
        e = tiny_engine()
        out = e.grpo_step(on_policy_batch(e), dict(LOSS, type=loss_type, kl_coef=0.1))
        assert out["loss"] == pytest.approx(want, abs=1e-5), loss_type
        assert out["kl"] == 0.0 and out["clip_frac_low"] == 0.0 and out["clip_frac_high"] == 0.0
        assert out["tokens"] == 8 and out["grad_norm"] > 0
        f = tiny_engine()  # the policy before the update, which the metrics are measured on
        want_h = sum(sum(unbatched_entropy(f, s["prompt_ids"], s["token_ids"])) for s in on_policy_batch(f)) / 8
        assert out["entropy"] == pytest.approx(want_h, abs=1e-4)
        assert e.policy_version == 1


def test_grpo_moves_logprobs_with_the_advantage_and_kl_grows():
    e = tiny_engine()
    batch = on_policy_batch(e)
    before = [sum(unbatched_logprobs(e, s["prompt_ids"], s["token_ids"])) for s in batch]
    out = e.grpo_step(batch, dict(LOSS, mu=4, kl_coef=0.1, learning_rate=0.01))
    after = [sum(unbatched_logprobs(e, s["prompt_ids"], s["token_ids"])) for s in batch]
    assert after[0] > before[0] and after[1] < before[1]
    assert e.policy_version == 1  # one per call, not per iteration
    # Later iterations are off-policy: the mean over 4 iterations differs from iteration 1's -0.5
    # and the KL against the disabled adapter is positive.
    assert out["loss"] != pytest.approx(-0.5, abs=1e-4)
    assert out["kl"] > 0
    again = e.grpo_step(on_policy_batch(e), dict(LOSS, kl_coef=0.1))
    assert again["kl"] > 0


def test_clip_fractions_count_tokens_outside_the_range():
    e = tiny_engine()
    batch = on_policy_batch(e)
    # Pretend the samples were drawn by a policy 2x more likely (r = 0.5 < 0.8) for
    # sample 1 (A < 0: clipped low) and 2x less likely (r = 2 > 1.2) for sample 0 (A > 0: clipped high).
    batch[0]["old_logprobs"] = [x - math.log(2) for x in batch[0]["old_logprobs"]]
    batch[1]["old_logprobs"] = [x + math.log(2) for x in batch[1]["old_logprobs"]]
    out = e.grpo_step(batch, dict(LOSS, learning_rate=1e-6))
    assert out["clip_frac_high"] == pytest.approx(3 / 8) and out["clip_frac_low"] == pytest.approx(5 / 8)
    # Every token is clipped: the surrogate is constant, the gradient zero.
    assert out["grad_norm"] == pytest.approx(0.0, abs=1e-9)
    # l = -clip(r)*A: sample 0: -1.2*1.5 per token, sample 1: -0.8*(-0.5) per token; grpo mean of means.
    assert out["loss"] == pytest.approx((-1.8 + 0.4) / 2, abs=1e-5)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_micro_batching_gives_the_same_update(loss_type):
    # Gradient accumulation over micro-batches of one sample: the same loss, metrics and
    # gradient (left in .grad by the last iteration) as the whole batch at once.
    e1, e2 = tiny_engine(), tiny_engine(micro_batch_size=1)
    o1 = e1.grpo_step(on_policy_batch(e1), dict(LOSS, type=loss_type, kl_coef=0.1, mu=2))
    o2 = e2.grpo_step(on_policy_batch(e2), dict(LOSS, type=loss_type, kl_coef=0.1, mu=2))
    for k in ("loss", "kl", "grad_norm", "entropy", "clip_frac_low", "clip_frac_high"):
        assert o2[k] == pytest.approx(o1[k], rel=1e-4, abs=1e-6), k
    # Padding each sample alone changes float32 rounding upstream, so a gradient element's error
    # scales with the whole gradient, not with the element: an element near 0 in a layer whose
    # gradient is small (1e-3) can be 1e-6 off where the largest elements are 0.5 (seen on one CPU
    # kind, not another). Tolerance 1e-5 of the largest element; a wrong micro-batch scaling
    # would be off by a share of every element.
    scale = max(float(a.grad.abs().max()) for a in e1.params)
    for a, b in zip(e1.params, e2.params):
        assert torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-5 * scale)


def test_failed_update_applies_nothing():
    e = tiny_engine()
    batch = on_policy_batch(e)
    batch[0]["old_logprobs"] = [-1e30] * len(batch[0]["token_ids"])  # r = exp(1e30) = inf
    before = [p.detach().clone() for p in e.params]
    with pytest.raises(NumericError, match="non-finite"):
        e.grpo_step(batch, LOSS)
    assert e.policy_version == 0
    assert all(torch.equal(a, b) for a, b in zip(before, e.params))
    assert e.optimizer.state_dict()["state"] == {}


def test_save_load_restores_policy_optimizer_and_version(tmp_path):
    e = tiny_engine(dropout=0.1)  # dropout makes the RNG state part of what must be restored
    e.grpo_step(on_policy_batch(e), LOSS)
    e.save_to(str(tmp_path / "ck"))
    batch = on_policy_batch(e)
    lp_at_save = unbatched_logprobs(e, batch[0]["prompt_ids"], batch[0]["token_ids"])
    first = e.grpo_step(batch, LOSS)
    params_first = [p.detach().clone() for p in e.params]
    assert e.load_from(str(tmp_path / "ck")) == 1
    assert e.policy_version == 1
    assert unbatched_logprobs(e, batch[0]["prompt_ids"], batch[0]["token_ids"]) == lp_at_save
    second = e.grpo_step(batch, LOSS)
    assert second == first
    assert all(torch.equal(a, b) for a, b in zip(params_first, e.params))


def test_load_refuses_a_checkpoint_of_another_model(tmp_path):
    e = tiny_engine(seed=0)
    e.save_to(str(tmp_path / "ck"))
    other = tiny_engine(seed=1)
    with pytest.raises(ValueError, match="was saved for base model"):
        other.load_from(str(tmp_path / "ck"))


def test_context_limit_names_the_prompt():
    e = tiny_engine()
    long = prompt_ids(e, "x" * 300)
    with pytest.raises(ValueError, match=r"prompts\[1\]: 301 prompt tokens"):
        e.sample([prompt_ids(e, "ok"), long], 1, 1.0, 1.0, 4, [], seed=0)


def test_token_logprobs_helper_agrees_with_engine():
    e = tiny_engine()
    p = prompt_ids(e, "abc")
    got = e.logprobs([p, p], [[5, 6], []], 1.0)
    assert got[1] == [] and got[0] == pytest.approx(unbatched_logprobs(e, p, [5, 6]), abs=1e-5)
    assert losses.LOSS_TYPES == ("grpo", "bnpo", "dapo", "dr_grpo")


def test_samples_without_tokens_count_in_the_batch_but_move_nothing():
    e = tiny_engine()
    p = prompt_ids(e, "empty")
    before = [t.detach().clone() for t in e.params]
    out = e.grpo_step([{"prompt_ids": p, "token_ids": [], "old_logprobs": [], "advantage": 1.0}], LOSS)
    assert out == {"loss": 0.0, "kl": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0, "clip_frac_dual": 0.0, "grad_norm": 0.0,
                   "entropy": 0.0, "tokens": 0}
    assert e.policy_version == 1  # the call was applied, with nothing to learn from
    assert all(torch.equal(a, b) for a, b in zip(before, e.params))
    # grpo: the empty sample still counts in B, halving the other's weight: -(1.5)/2.
    batch = on_policy_batch(e, n=1, advantages=(1.5,), max_tokens=(4,))
    batch.append({"prompt_ids": p, "token_ids": [], "old_logprobs": [], "advantage": -3.0})
    assert e.grpo_step(batch, LOSS)["loss"] == pytest.approx(-0.75, abs=1e-5)


def test_default_max_tokens_respects_the_limit():
    e = tiny_engine(limits=Limits(max_tokens=3))
    s = e.sample([prompt_ids(e, "long")], 1, 1.0, 1.0, 0, [], seed=0)[0]
    assert len(s["token_ids"]) <= 3


def test_max_prompt_tokens_keeps_the_end_of_long_prompts():
    e = tiny_engine()
    e.max_prompt_tokens = 5
    assert e.encode_prompt({"text": "0123456789", "messages": []}, "p") == [ord(c) for c in "56789"]
    assert e.encode_prompt({"text": "abc", "messages": []}, "p") == [BOS_ID] + [ord(c) for c in "abc"]


def _zero_advantage_step(e, batch, weight_decay):
    """From the engine's state: one grpo_step with advantage 0 (zero gradient,
    but Adam's momentum from earlier steps still moves the weights)."""
    zero = [dict(s, advantage=0.0) for s in batch]
    e.grpo_step(zero, dict(LOSS, weight_decay=weight_decay))
    return [p.detach().clone() for p in e.params]


def test_weight_decay_is_decoupled_adamw(tmp_path):
    # AdamW: p <- p - lr*wd*p, then the Adam step, which does not see wd.
    # From one saved state, the runs with and without decay differ by
    # exactly -lr*wd*p_before (float32 rounding aside).
    e = tiny_engine()
    batch = on_policy_batch(e)
    e.grpo_step(batch, LOSS)  # LoRA B != 0 and momentum != 0
    e.save_to(str(tmp_path / "ck"))
    before = [p.detach().clone() for p in e.params]
    plain = _zero_advantage_step(e, batch, 0.0)
    e.load_from(str(tmp_path / "ck"))
    lr, wd = LOSS["learning_rate"], 0.3
    decayed = _zero_advantage_step(e, batch, wd)
    moved = 0
    for p0, a, b in zip(before, plain, decayed):
        assert torch.allclose(b - a, -lr * wd * p0, atol=1e-7, rtol=1e-5)
        moved += int((p0 != 0).sum())
    assert moved > 0


def test_weight_decay_unset_in_the_request_means_the_server_default(tmp_path):
    runs = []
    for engine_wd, request_wd in ((0.3, None), (0.0, 0.3)):
        e = tiny_engine(weight_decay=engine_wd)
        batch = on_policy_batch(e)
        e.grpo_step(batch, dict(LOSS, weight_decay=request_wd))
        runs.append(_zero_advantage_step(e, batch, request_wd))
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    e = tiny_engine()
    batch = on_policy_batch(e)
    e.grpo_step(batch, LOSS)
    without = _zero_advantage_step(e, batch, 0.0)
    assert not all(torch.equal(a, b) for a, b in zip(runs[0], without))
    # An explicit 0 is Adam, also on a server whose default decays.
    e = tiny_engine(weight_decay=0.3)
    batch = on_policy_batch(e)
    e.grpo_step(batch, dict(LOSS, weight_decay=0.0))
    assert all(torch.equal(a, b) for a, b in zip(_zero_advantage_step(e, batch, 0.0), without))


# ---------------------------------------------------------------- speed-ups of the tiny backend


def naive_logits(model, seq):
    """The tiny model on one unpadded sequence, attention written out per head in
    float64 with a -inf causal mask: independent of attention_bias, the query
    blocks of causal_attention, the cache and the shared prompts."""
    model = copy.deepcopy(model).double()
    ids = torch.tensor(seq)
    x = model.embed(ids) + model.pos(torch.arange(len(seq)))
    n = len(seq)
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    for blk in model.blocks:
        h = blk.n_heads
        hd = x.shape[-1] // h
        y = blk.ln1(x)
        q, k, v = (getattr(blk, m)(y) for m in ("q_proj", "k_proj", "v_proj"))
        heads = []
        for i in range(h):
            sl = slice(i * hd, (i + 1) * hd)
            att = (q[:, sl] @ k[:, sl].T) / math.sqrt(hd)
            heads.append(torch.softmax(att.masked_fill(upper, float("-inf")), dim=-1) @ v[:, sl])
        x = x + blk.o_proj(torch.cat(heads, dim=-1))
        x = x + blk.down_proj(torch.nn.functional.gelu(blk.up_proj(blk.ln2(x))))
    return model.lm_head(model.ln_f(x))


def randomize_adapter(e: Engine, seed: int = 0):
    """LoRA B is 0 at init; give the adapter weights so that it changes the model."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in e.params:
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)


@pytest.mark.parametrize("block", [3, 128])
def test_tiny_forward_equals_naive_attention(monkeypatch, block):
    from lora_trainer import tiny

    monkeypatch.setattr(tiny, "QUERY_BLOCK", block)  # 3: several query blocks, some of them partial
    e = tiny_engine()
    randomize_adapter(e)
    prompts = [prompt_ids(e, "a longer prompt here"), prompt_ids(e, "short")]
    comps = [[5, 6, 7], [8, 9, 10, 11, 12]]
    b = e._batch(prompts, comps)  # left-padded prompts, right-padded completions
    with torch.no_grad():
        logits, _ = e.backend.forward(b.input_ids, b.attention_mask, b.position_ids)
        for r, (p, c) in enumerate(zip(prompts, comps)):
            want = naive_logits(e.backend.model, p + c)
            start = b.prompt_len - len(p)
            got = logits[r, start : start + len(p) + len(c)]
            assert torch.allclose(got.double(), want, atol=1e-5), (r, (got.double() - want).abs().max())
            assert torch.isfinite(logits[r]).all()  # padding queries too: no NaN


def test_prompt_is_computed_once_per_group_and_not_again_for_the_logprobs():
    e = tiny_engine()
    rows_seen = []
    forward = e.backend.forward

    def counting(input_ids, *a, **k):
        rows_seen.append(tuple(input_ids.shape))
        return forward(input_ids, *a, **k)

    e.backend.forward = counting
    prompts = [prompt_ids(e, "first prompt"), prompt_ids(e, "second")]
    out = e.sample(prompts, 4, 1.0, 1.0, 3, [], seed=2)
    p = len(prompts[0])
    # One prefill of the 2 distinct prompts, then 8 rows of one token per step,
    # then the logprobs: 8 rows of (completion - 1) tokens on the prefill's cache.
    assert rows_seen[0] == (2, p)
    assert all(s[0] == 8 and s[1] < p for s in rows_seen[1:]), rows_seen
    for s in out:
        want = unbatched_logprobs(e, prompts[s["prompt_index"]], s["token_ids"])
        assert s["logprobs"] == pytest.approx(want, abs=1e-5)


def test_shared_prompts_give_the_full_forward_values_and_gradients():
    shared, full = tiny_engine(), tiny_engine()
    full.share_prompts = False  # every row's prompt + completion in one pass
    for e in (shared, full):
        randomize_adapter(e, seed=3)
    p0, p1 = prompt_ids(shared, "group one"), prompt_ids(shared, "group two is longer")
    prompts = [p0, p0, p0, p1, p1]
    comps = [[1, 2, 3], [4], [5, 6], [7, 8, 9, 10], []]
    grads, values = [], []
    for e in (shared, full):
        b = e._batch(prompts, comps)
        e.optimizer.zero_grad(set_to_none=True)
        logits = e._completion_logits(b)
        lp = losses.token_logprobs(logits, b.targets, 1.0)
        (lp * b.mask * torch.arange(1, 6).unsqueeze(1)).sum().backward()  # rows weighted differently
        values.append(lp * b.mask)
        grads.append([p.grad.clone() for p in e.params])
    assert torch.allclose(values[0], values[1], atol=1e-5)
    for g_shared, g_full in zip(*grads):
        assert g_full.abs().max() > 0
        assert torch.allclose(g_shared, g_full, atol=1e-5, rtol=1e-4)
    for r, (p, c) in enumerate(zip(prompts, comps)):
        if c:
            assert values[0][r, : len(c)].tolist() == pytest.approx(unbatched_logprobs(shared, p, c), abs=1e-5)


def test_sampling_does_not_depend_on_micro_batches_that_split_groups():
    whole, split = tiny_engine(), tiny_engine(micro_batch_size=3)  # 3 does not divide the groups of 4
    prompts = [prompt_ids(whole, "alpha"), prompt_ids(whole, "beta gamma")]
    a = whole.sample(prompts, 4, 1.0, 0.9, 6, [], seed=11)
    b = split.sample(prompts, 4, 1.0, 0.9, 6, [], seed=11)
    assert [s["token_ids"] for s in a] == [s["token_ids"] for s in b]
    for sa, sb in zip(a, b):
        assert sa["logprobs"] == pytest.approx(sb["logprobs"], abs=1e-5)


def test_sampling_without_shared_prompts_gives_the_same_samples():
    # The path of a backend without expand_cache (hf): a forward per row.
    shared, rows = tiny_engine(), tiny_engine()
    rows.share_prompts = False
    prompts = [prompt_ids(shared, "one"), prompt_ids(shared, "two, longer")]
    a = shared.sample(prompts, 3, 1.0, 1.0, 5, [], seed=4)
    b = rows.sample(prompts, 3, 1.0, 1.0, 5, [], seed=4)
    assert [s["token_ids"] for s in a] == [s["token_ids"] for s in b]
    for sa, sb in zip(a, b):
        assert sa["logprobs"] == pytest.approx(sb["logprobs"], abs=1e-5)
        assert sb["logprobs"] == pytest.approx(unbatched_logprobs(rows, prompts[sb["prompt_index"]], sb["token_ids"]), abs=1e-5)
