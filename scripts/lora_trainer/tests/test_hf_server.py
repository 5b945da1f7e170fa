"""The hf backend (transformers + PEFT) on tiny random Llama and Qwen2 models
built here, through the HTTP server: conformance, SFT, GRPO, checkpoints,
--init-adapter, PEFT reloading, and on-policy ratios of 1."""

import os
import subprocess
import sys

import pytest
import torch

from .conftest import ROOT

LORA = ["--backend", "hf", "--lora-rank", "4", "--lora-alpha", "8", "--seed", "3"]
CHAT = [{"role": "system", "content": "rewrite the question so that it stands alone."},
        {"role": "user", "content": "what caused the bronze age collapse?"}]
PROMPTS = [{"messages": CHAT}, {"text": "how did the hittite empire end?"}]

# fp32 on a CPU: the same tokens scored in differently shaped batches (the
# sample call's rows versus a grpo_step's, other padding) agree to ~1e-6.
ON_POLICY_TOL = 1e-5
PEFT_TOL = 1e-5


@pytest.fixture(params=["llama", "qwen2"])
def base_dir(request):
    return request.getfixturevalue(f"{request.param}_dir")


def test_trainer_check_passes_every_property(base_dir, himes_bin, serve):
    s = serve(LORA + ["--base-model", base_dir])
    p = subprocess.run([himes_bin, "trainer", "check", "--endpoint", s.url], cwd=ROOT, capture_output=True, text=True, timeout=600)
    report = [line for line in p.stdout.splitlines() if line.startswith(("PASS", "FAIL", "SKIP"))]
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(report) >= 15 and all(line.startswith("PASS") for line in report), "\n".join(report)


def sample(s, n=4, temperature=1.0, seed=7, max_tokens=8, prompts=PROMPTS):
    return s.ok("/v1/sample", {"prompts": prompts, "n": n, "temperature": temperature, "max_tokens": max_tokens, "seed": seed})["samples"]


def logprobs(s, samples, prompts=PROMPTS, temperature=1.0):
    items = [{"prompt": prompts[x["prompt_index"]], "token_ids": x["token_ids"]} for x in samples]
    return s.ok("/v1/logprobs", {"items": items, "temperature": temperature})["logprobs"]


def grpo(s, step_id, samples, advantages, prompts=PROMPTS, **loss):
    body = {
        "step_id": step_id,
        "loss": dict({"type": "grpo", "learning_rate": 0.01}, **loss),
        "samples": [{"prompt": prompts[x["prompt_index"]], "token_ids": x["token_ids"], "old_logprobs": x["logprobs"], "advantage": a}
                    for x, a in zip(samples, advantages)],
    }
    return s.ok("/v1/grpo_step", body)


def test_sft_steps_lower_the_loss(llama_dir, serve):
    s = serve(LORA + ["--base-model", llama_dir])
    body = {"examples": [{"prompt": PROMPTS[0], "completion": "what caused the collapse of bronze age palaces?"},
                         {"prompt": PROMPTS[1], "completion": "how did the hittite empire end?"}],
            "learning_rate": 0.05}
    losses = [s.ok("/v1/sft_step", dict(body, step_id=f"sft-{k}"))["loss"] for k in range(5)]
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.8 * losses[0], losses
    assert s.ok("/v1/info")["policy_version"] == 5


def test_grpo_steps_move_logprobs_by_the_sign_of_the_advantage(base_dir, serve):
    s = serve(LORA + ["--base-model", base_dir])
    xs = [x for x in sample(s) if x["token_ids"]]
    assert len(xs) >= 4
    adv = [1.0 if k % 2 == 0 else -1.0 for k in range(len(xs))]
    before = [sum(lp) for lp in logprobs(s, xs)]
    out = grpo(s, "g1", xs, adv, kl_coef=0.05, mu=2, clip_high=0.28)
    for k in ("loss", "kl", "clip_frac_low", "clip_frac_high", "grad_norm", "entropy"):
        assert out[k] == out[k], k  # finite numbers (the server never sends NaN)
    assert out["policy_version"] == 1 and out["tokens"] == sum(len(x["token_ids"]) for x in xs)
    assert out["grad_norm"] > 0 and out["kl"] >= 0
    after = [sum(lp) for lp in logprobs(s, xs)]
    moved = [(b - a) * d for a, b, d in zip(before, after, adv)]
    assert sum(moved) > 0 and sum(m > 0 for m in moved) >= 0.75 * len(moved), moved
    # A second step sees a policy away from the reference: the KL is positive.
    second = grpo(s, "g2", xs, adv, kl_coef=0.05)
    assert second["kl"] > 0 and second["policy_version"] == 2


def test_sampling_and_training_logprobs_agree_on_policy(base_dir, serve):
    """r = 1 at the first mu-iteration: with clip_low = clip_high = ε, a token
    counts as clipped when |r - 1| > ε, so zero clip fractions bound every
    token's |r - 1| by ε. Each sample goes in with A = +1 and A = -1 (the
    upper and the lower side)."""
    s = serve(LORA + ["--base-model", base_dir])
    # Move the adapter off zero first, so the LoRA path contributes.
    xs = [x for x in sample(s, temperature=0.7) if x["token_ids"]]
    grpo(s, "warm", xs, [1.0] * len(xs), temperature=0.7)
    xs = [x for x in sample(s, temperature=0.7, seed=11) if x["token_ids"]]
    both = xs + xs
    adv = [1.0] * len(xs) + [-1.0] * len(xs)
    out = grpo(s, "on-policy", both, adv, clip_low=ON_POLICY_TOL, clip_high=ON_POLICY_TOL, temperature=0.7, learning_rate=1e-9)
    assert out["clip_frac_low"] == 0 and out["clip_frac_high"] == 0, out
    # The same, measured: the engine's training-mode forward against the sample's logprobs.
    e = s.engine
    ids = [e.encode_prompt(PROMPTS[x["prompt_index"]], "p") for x in xs]
    b = e._batch(ids, [x["token_ids"] for x in xs])
    e.backend.train(True)
    try:
        from lora_trainer import losses

        with torch.no_grad():
            lp = losses.token_logprobs(e._completion_logits(b), b.targets, 0.7)
    finally:
        e.backend.train(False)
    diff = max(abs(float(lp[r, t]) - x["logprobs"][t]) for r, x in enumerate(xs) for t in range(len(x["token_ids"])))
    assert diff <= ON_POLICY_TOL, diff


def test_save_load_gives_identical_logprobs(base_dir, serve):
    s = serve(LORA + ["--base-model", base_dir])
    xs = [x for x in sample(s) if x["token_ids"]]
    grpo(s, "g1", xs, [1.0] * len(xs))
    saved = logprobs(s, xs)
    s.ok("/v1/save", {"step_id": "save", "name": "ck"})
    grpo(s, "g2", xs, [-1.0] * len(xs))
    assert logprobs(s, xs) != saved
    assert s.ok("/v1/load", {"step_id": "load", "name": "ck"})["policy_version"] == 1
    assert logprobs(s, xs) == saved


def test_init_adapter_and_peft_reload_reproduce_the_server(llama_dir, serve, tmp_path):
    import peft
    import transformers

    s = serve(LORA + ["--base-model", llama_dir], checkpoint_dir=str(tmp_path / "ck"))
    xs = [x for x in sample(s) if x["token_ids"]]
    grpo(s, "g1", xs, [1.0 if k % 2 else -1.0 for k in range(len(xs))], learning_rate=0.05)
    want = logprobs(s, xs)
    s.ok("/v1/save", {"step_id": "save", "name": "trained"})
    adapter = str(tmp_path / "ck" / "trained" / "adapter")

    # A new server started from the adapter scores the same.
    s2 = serve(["--backend", "hf", "--base-model", llama_dir, "--init-adapter", adapter])
    assert s2.ok("/v1/info")["adapter"] == s.ok("/v1/info")["adapter"]
    got = logprobs(s2, xs)
    assert max(abs(a - b) for x, y in zip(got, want) for a, b in zip(x, y)) <= PEFT_TOL

    # Plain transformers + PEFT, one unpadded sequence at a time.
    base = transformers.AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32)
    model = peft.PeftModel.from_pretrained(base, adapter).eval()
    diff = base_diff = 0.0
    for x, server_lp in zip(xs, want):
        p = s.engine.encode_prompt(PROMPTS[x["prompt_index"]], "p")
        ids = torch.tensor([p + x["token_ids"]])
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
            with model.disable_adapter():
                lp0 = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        for t, tok in enumerate(x["token_ids"]):
            diff = max(diff, abs(float(lp[len(p) - 1 + t, tok]) - server_lp[t]))
            base_diff = max(base_diff, abs(float(lp0[len(p) - 1 + t, tok]) - server_lp[t]))
    assert diff <= PEFT_TOL, diff
    assert base_diff > 1e-3, base_diff  # the adapter matters: the check above can fail


# ---------------------------------------------------------------- bad input: one line naming the path, nothing written


def run_main(argv, tmp_path, capsys):
    from lora_trainer.cli import main

    ck, port = tmp_path / "never-ck", tmp_path / "never-port"
    rc = main(argv + ["--device", "cpu", "--port", "0", "--checkpoint-dir", str(ck), "--port-file", str(port)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err
    assert not ck.exists() and not port.exists()  # nothing written
    return err


def copy_model(src, dst, skip=()):
    os.makedirs(dst)
    for f in os.listdir(src):
        if f not in skip:
            with open(os.path.join(src, f), "rb") as a, open(os.path.join(dst, f), "wb") as b:
                b.write(a.read())
    return str(dst)


def test_model_dir_missing_weights_is_one_line_from_the_command(llama_dir, tmp_path):
    """The real command line: exit 2, one error line naming the directory, no traceback."""
    bad = copy_model(llama_dir, tmp_path / "noweights", skip=("model.safetensors",))
    ck = tmp_path / "ck"
    p = subprocess.run([sys.executable, "-m", "lora_trainer", "--backend", "hf", "--base-model", bad, "--device", "cpu",
                        "--port", "0", "--checkpoint-dir", str(ck)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    assert f"--base-model {bad}: not a complete model directory, missing model.safetensors" in p.stderr
    assert not ck.exists()


@pytest.mark.parametrize("skip,missing", [(("config.json",), "config.json"),
                                          (("tokenizer.json", "tokenizer_config.json"), "tokenizer.json or tokenizer_config.json")])
def test_model_dir_missing_files(llama_dir, tmp_path, capsys, skip, missing):
    bad = copy_model(llama_dir, tmp_path / "bad", skip=skip)
    err = run_main(["--backend", "hf", "--base-model", bad], tmp_path, capsys)
    assert f"--base-model {bad}: not a complete model directory, missing {missing}" in err


def test_model_dir_with_a_damaged_weight_file(llama_dir, tmp_path, capsys):
    bad = copy_model(llama_dir, tmp_path / "bad")
    with open(os.path.join(bad, "model.safetensors"), "r+b") as f:
        f.truncate(100)
    err = run_main(["--backend", "hf", "--base-model", bad], tmp_path, capsys)
    assert f"--base-model {bad}: cannot load the model:" in err


def test_missing_model_path(tmp_path, capsys, hf_available):
    err = run_main(["--backend", "hf", "--base-model", str(tmp_path / "nope")], tmp_path, capsys)
    assert f"--base-model {tmp_path / 'nope'}: not a model directory" in err


def test_tokenizer_without_chat_template(tmp_path, capsys, hf_available):
    from .hf_models import build_model

    d = build_model(str(tmp_path / "plain"), "llama", chat_template=False)
    err = run_main(["--backend", "hf", "--base-model", d], tmp_path, capsys)
    assert f"--base-model {d}: the tokenizer has no chat template" in err and "--plain-chat" in err


def test_adapter_of_another_base(llama_dir, qwen2_dir, tmp_path, capsys, serve):
    s = serve(LORA + ["--base-model", llama_dir], checkpoint_dir=str(tmp_path / "ck"))
    s.ok("/v1/save", {"step_id": "save", "name": "a"})
    adapter = str(tmp_path / "ck" / "a" / "adapter")
    # Same module names and shapes, another model: refused by the adapter's recorded base.
    err = run_main(["--backend", "hf", "--base-model", qwen2_dir, "--init-adapter", adapter], tmp_path, capsys)
    assert f"--init-adapter {adapter}: trained on base model {llama_dir}" in err
    # Another shape: refused when loading.
    from .hf_models import build_model

    wide = build_model(str(tmp_path / "wide"), "llama", hidden=48)
    err = run_main(["--backend", "hf", "--base-model", wide, "--init-adapter", adapter], tmp_path, capsys)
    assert f"--init-adapter {adapter}: does not fit --base-model {wide}" in err
    # Not an adapter directory at all.
    err = run_main(["--backend", "hf", "--base-model", llama_dir, "--init-adapter", str(tmp_path)], tmp_path, capsys)
    assert f"--init-adapter {tmp_path}: not a PEFT adapter directory, missing adapter_config.json" in err
