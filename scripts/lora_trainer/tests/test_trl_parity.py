"""The hf backend's GRPO loss and LoRA gradients against TRL's own code.

TRL's GRPOTrainer is built for real (GRPOConfig, a PEFT model, its fused LM
head patched in by the constructor) on a copy of the server's policy, and its
`_compute_loss` is called on the same batch the engine's grpo_step gets: the
same prompt and completion tokens, advantages, old logprobs (off-policy, so
clipping happens) and reference logprobs. Loss and every LoRA gradient must
agree, for each loss type both support, with and without the KL term (TRL's
use_bias_correction_kl=False: the protocol's k3 term is not weighted by the
importance ratio, which TRL's default is), on the
whole batch and split into two micro-batches (which TRL accumulates as in its
training loop; it is where bnpo and dapo differ). Swapping two aggregations
is caught: every other type's loss is far outside the tolerance.
"""

import itertools

import pytest
import torch

from lora_trainer import protocol

# fp32 on a CPU: the two sides run the same model through different code
# (TRL's tiled LM head, another batch layout), so they agree up to rounding.
LOSS_TOL = 2e-6  # relative to max(1, |loss|)
GRAD_TOL = 2e-5  # max abs difference relative to the gradient's max abs entry
TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
TEMPERATURE = 0.8
MAX_COMPLETION = 8


@pytest.fixture(scope="module")
def setup(llama_dir, tmp_path_factory):
    """The server's engine on the tiny Llama with a trained (B != 0) adapter,
    a batch, and TRL's model loaded from the same base and adapter."""
    from lora_trainer.cli import build_engine, parse_args

    work = tmp_path_factory.mktemp("parity")
    e = build_engine(parse_args(["--backend", "hf", "--base-model", llama_dir, "--device", "cpu", "--lora-rank", "4",
                                 "--lora-alpha", "8", "--seed", "5", "--threads", "1"]))
    prompt = e.encode_prompt({"messages": [{"role": "user", "content": "what caused the bronze age collapse?"}]}, "p")
    xs = e.sample([prompt], 6, TEMPERATURE, 1.0, MAX_COMPLETION, [], 4)
    warm = [{"prompt_ids": prompt, "token_ids": x["token_ids"], "old_logprobs": x["logprobs"], "advantage": a}
            for x, a in zip(xs, (1.0, -1.0, 0.5, -0.5, 1.0, -1.0))]
    e.grpo_step(warm, protocol.parse_loss({"learning_rate": 0.05, "temperature": TEMPERATURE}))

    # Completions of several lengths (rows of equal length would make grpo and bnpo coincide).
    gen = torch.Generator().manual_seed(0)
    vocab = e.tok.vocab_size
    lengths = [1, 8, 3, 6, 2, 5]
    completions = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in lengths]
    prompts = [prompt] * len(completions)  # one group: TRL's forward takes no position ids, so no left padding
    current = e.logprobs(prompts, completions, TEMPERATURE)
    old = [[v + float(torch.randn(1, generator=gen)) * 0.3 for v in lp] for lp in current]  # |r - 1| up to ~0.6
    with torch.no_grad(), e.backend.adapter_disabled():
        ref = e.logprobs(prompts, completions, TEMPERATURE)
    advantages = [1.5, -0.8, 0.4, -1.2, 0.9, -0.3]
    ck = str(work / "ck")
    e.save_to(ck)
    return {"engine": e, "ck": ck, "prompt": prompt, "completions": completions, "old": old, "ref": ref,
            "advantages": advantages, "base": llama_dir, "adapter": ck + "/adapter", "work": work}


def engine_loss_and_grads(s, loss_type, beta, micro):
    e = s["engine"]
    e.load_from(s["ck"])
    e.micro_batch_size = micro
    samples = [{"prompt_ids": s["prompt"], "token_ids": c, "old_logprobs": o, "advantage": a}
               for c, o, a in zip(s["completions"], s["old"], s["advantages"])]
    loss = protocol.parse_loss({"type": loss_type, "learning_rate": 1e-3, "kl_coef": beta, "clip_low": 0.2, "clip_high": 0.28,
                                "temperature": TEMPERATURE, "max_length": MAX_COMPLETION,
                                "max_grad_norm": 0.0})  # no clipping: p.grad is the raw gradient
    try:
        out = e.grpo_step(samples, loss)
    finally:
        e.micro_batch_size = 0
    # grad holds the gradient of the loss at the policy before the update (mu = 1, no clipping).
    grads = {n: p.grad.detach().clone() for n, p in e.backend.model.named_parameters() if p.requires_grad}
    return out["loss"], grads


def trl_trainer(s, loss_type, beta, micro_batches):
    import datasets
    import peft
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    base = transformers.AutoModelForCausalLM.from_pretrained(s["base"], dtype=torch.float32)
    model = peft.PeftModel.from_pretrained(base, s["adapter"], is_trainable=True)
    n = len(s["completions"])
    args = GRPOConfig(
        output_dir=str(s["work"] / f"trl-{loss_type}-{beta}-{micro_batches}"),
        loss_type=loss_type, beta=beta, epsilon=0.2, epsilon_high=0.28, temperature=TEMPERATURE,
        max_completion_length=MAX_COMPLETION, num_generations=n // micro_batches,
        per_device_train_batch_size=n // micro_batches, gradient_accumulation_steps=micro_batches,
        use_cpu=True, bf16=False, report_to=[], logging_strategy="no", save_strategy="no",
        # The protocol's KL term is plain k3 (PROTOCOL.md); TRL >= 1.x multiplies it by the
        # importance ratio unless told not to (its default, True, differs once r != 1).
        use_bias_correction_kl=False,
    )
    tok = transformers.AutoTokenizer.from_pretrained(s["base"])
    return GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
                       train_dataset=datasets.Dataset.from_list([{"prompt": "q"}] * n), processing_class=tok)


def trl_inputs(s, rows, pad_id):
    c = max(len(s["completions"][k]) for k in rows)

    def padded(xs, value):
        return torch.tensor([list(x) + [value] * (c - len(x)) for x in xs])

    comps = [s["completions"][k] for k in rows]
    return {
        "prompt_ids": torch.tensor([s["prompt"]] * len(rows)),
        "prompt_mask": torch.ones(len(rows), len(s["prompt"]), dtype=torch.long),
        "completion_ids": padded(comps, pad_id),
        "completion_mask": padded([[1] * len(x) for x in comps], 0),
        "advantages": torch.tensor([s["advantages"][k] for k in rows]),
        "old_per_token_logps": padded([s["old"][k] for k in rows], 0.0).float(),
        "ref_per_token_logps": padded([s["ref"][k] for k in rows], 0.0).float(),
        # dapo's normalizer: the tokens of the whole generation batch
        "num_items_in_batch": torch.tensor(float(sum(len(x) for x in s["completions"]))),
    }


def trl_loss_and_grads(s, loss_type, beta, micro_batches):
    """TRL's loss as its training loop accumulates it: _compute_loss per micro-batch, summed."""
    t = trl_trainer(s, loss_type, beta, micro_batches)
    t.model.train()
    t.current_gradient_accumulation_steps = micro_batches
    n = len(s["completions"])
    size = n // micro_batches
    total = 0.0
    for start in range(0, n, size):
        loss = t._compute_loss(t.model, trl_inputs(s, range(start, start + size), s["engine"].tok.pad_id))
        loss.backward()
        total += float(loss.detach())
    grads = {n: p.grad.detach().clone() for n, p in t.model.named_parameters() if p.requires_grad}
    return total, grads


@pytest.fixture(scope="module")
def results(setup):
    out = {}
    for loss_type, beta, micro in itertools.product(TYPES, (0.0, 0.1), (1, 2)):
        mbs = 0 if micro == 1 else len(setup["completions"]) // micro
        out[(loss_type, beta, micro)] = (engine_loss_and_grads(setup, loss_type, beta, mbs),
                                         trl_loss_and_grads(setup, loss_type, beta, micro))
    return out


@pytest.mark.parametrize("loss_type,beta,micro", list(itertools.product(TYPES, (0.0, 0.1), (1, 2))))
def test_loss_and_lora_gradients_equal_trl(results, loss_type, beta, micro):
    (ours, our_grads), (theirs, their_grads) = results[(loss_type, beta, micro)]
    assert abs(ours - theirs) <= LOSS_TOL * max(1.0, abs(theirs)), (ours, theirs)
    assert set(our_grads) == set(their_grads) and len(our_grads) == 2 * 4 * 2  # A and B of q, k, v, o in 2 layers
    for name, g in their_grads.items():
        scale = float(g.abs().max())
        assert scale > 0, name  # B != 0, so A's gradients are not trivially zero either
        diff = float((our_grads[name] - g).abs().max())
        assert diff <= GRAD_TOL * scale, (name, diff, scale)


def test_a_swapped_aggregation_is_caught(results):
    """Every other type's TRL loss is far outside the tolerance of ours (with
    micro-batches, where bnpo and dapo differ too), so the parity test above
    fails if the engine used the wrong aggregation for a type."""
    for beta in (0.0, 0.1):
        for ours_type, theirs_type in itertools.permutations(TYPES, 2):
            ours = results[(ours_type, beta, 2)][0][0]
            theirs = results[(theirs_type, beta, 2)][1][0]
            assert abs(ours - theirs) > 100 * LOSS_TOL * max(1.0, abs(theirs)), (ours_type, theirs_type, ours, theirs)
