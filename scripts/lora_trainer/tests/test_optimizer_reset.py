"""grpo_step's reset_optimizer (PROTOCOL.md): the first RL step after SFT starts
from a fresh AdamW, on every backend. The property: an engine that did SFT and
then a grpo_step with reset_optimizer takes exactly the update (parameter
delta) of a fresh engine holding the same weights; without the reset, the
update differs (SFT's moments carry into RL)."""

import json
from typing import Callable, List

import pytest
import torch

from lora_trainer import protocol
from lora_trainer.cli import build_engine, parse_args
from lora_trainer.engine import Engine

from .conftest import Server

LOSS = protocol.parse_loss({"learning_rate": 0.01, "kl_coef": 0.05})
SFT_LR = 0.01


def engine_from(argv: List[str]) -> Engine:
    return build_engine(parse_args(list(argv) + ["--device", "cpu", "--threads", "1"]))


def snapshot(e: Engine) -> List[torch.Tensor]:
    return [p.detach().clone() for p in e.params]


def set_params(e: Engine, values: List[torch.Tensor]) -> None:
    with torch.no_grad():
        for p, v in zip(e.params, values):
            p.copy_(v)


def delta(e: Engine, before: List[torch.Tensor]) -> torch.Tensor:
    return torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(e.params, before)])


def check_reset(make: Callable[[], Engine], sft_examples, grpo_samples) -> None:
    """sft_examples(e) and grpo_samples(e) build the requests for engine e."""
    sft_reset, sft_keep, fresh = make(), make(), make()
    for e in (sft_reset, sft_keep):
        e.sft_step(sft_examples(e), SFT_LR, 3, 1.0)
        assert e.optimizer.state, "SFT left AdamW state behind"
    start = snapshot(sft_reset)
    assert all(torch.equal(a, b) for a, b in zip(start, snapshot(sft_keep))), "SFT is deterministic"
    set_params(fresh, start)  # a fresh trainer loaded with the same weights: no optimizer state
    samples = grpo_samples(sft_reset)

    sft_reset.grpo_step(samples, LOSS, reset_optimizer=True)
    fresh.grpo_step(samples, LOSS)
    sft_keep.grpo_step(samples, LOSS)
    d_reset, d_fresh, d_keep = delta(sft_reset, start), delta(fresh, start), delta(sft_keep, start)
    assert d_fresh.abs().max() > 0, "the GRPO step moved nothing"
    torch.testing.assert_close(d_reset, d_fresh, rtol=1e-5, atol=1e-7)
    # Adam's first step moves each weight by about lr; carried-over moments make it differ.
    assert (d_keep - d_fresh).abs().max() > 1e-3 * LOSS["learning_rate"], "without the reset the update should differ"
    # The reset left the state of one step, as a fresh optimizer's.
    steps = {float(s["step"]) for s in sft_reset.optimizer.state.values()}
    assert steps == {1.0}, steps


def token_requests(texts=("hello there", "a second prompt")):
    def sft(e):
        return [(e.encode_prompt({"text": t}, "p"), e.tok.encode(" answer " + t)) for t in texts]

    def grpo(e):
        prompts = [e.encode_prompt({"text": t}, "p") for t in texts]
        out = e.sample(prompts, 2, 1.0, 1.0, 6, [], seed=3)
        return [{"prompt_ids": prompts[s["prompt_index"]], "token_ids": s["token_ids"], "old_logprobs": s["logprobs"],
                 "advantage": 1.0 if s["sample_index"] == 0 else -1.0} for s in out]

    return sft, grpo


def test_reset_tiny():
    sft, grpo = token_requests()
    check_reset(lambda: engine_from(["--backend", "tiny", "--tiny-d-model", "32", "--lora-rank", "4"]), sft, grpo)


def test_reset_hf(llama_dir):
    sft, grpo = token_requests()
    check_reset(lambda: engine_from(["--backend", "hf", "--base-model", llama_dir, "--lora-rank", "4"]), sft, grpo)


def test_reset_tagger():
    from .test_tagger import base_model, demo_prompts

    path = base_model()
    data = demo_prompts(3)

    def make():
        return engine_from(["--backend", "tagger", "--base-model", path, "--tagger-max-seq-tokens", "128",
                            "--tagger-max-message-tokens", "48", "--lora-rank", "4", "--tagger-head-hidden", "32"])

    def sft(e):
        return [(e.encode_prompt(p, "p"), e.tok.encode(rw)) for p, rw in data]

    def grpo(e):
        views = [e.encode_prompt(p, "p") for p, _ in data]
        out = e.sample(views, 2, 1.0, 1.0, 0, [], seed=3)
        return [{"prompt_ids": views[s["prompt_index"]], "token_ids": s["token_ids"], "old_logprobs": s["logprobs"],
                 "advantage": 1.0 if s["sample_index"] == 0 else -1.0} for s in out]

    check_reset(make, sft, grpo)


def test_reset_is_protocol_visible_and_not_repeated_by_a_replay(tmp_path):
    s = Server(["--backend", "tiny", "--tiny-d-model", "32", "--lora-rank", "4"], str(tmp_path / "ck"))
    try:
        info = s.ok("/v1/info")
        assert info["capabilities"]["optimizer_reset"] is True and info["world_size"] == 1
        prompt = {"text": "hello"}
        s.ok("/v1/sft_step", {"step_id": "s1", "examples": [{"prompt": prompt, "completion": "world"}],
                              "learning_rate": 0.01, "epochs": 2})
        assert {float(v["step"]) for v in s.engine.optimizer.state.values()} == {2.0}
        smp = s.ok("/v1/sample", {"prompts": [prompt], "n": 2, "temperature": 1.0, "max_tokens": 4, "seed": 1})["samples"]
        body = {"step_id": "g1", "reset_optimizer": True, "loss": {"learning_rate": 0.01},
                "samples": [{"prompt": prompt, "token_ids": x["token_ids"], "old_logprobs": x["logprobs"],
                             "advantage": 1.0 - 2 * k} for k, x in enumerate(smp)]}
        first = s.ok("/v1/grpo_step", body)
        assert {float(v["step"]) for v in s.engine.optimizer.state.values()} == {1.0}
        params = snapshot(s.engine)
        again = s.ok("/v1/grpo_step", body)
        assert again["replayed"] is True and again["policy_version"] == first["policy_version"]
        assert {float(v["step"]) for v in s.engine.optimizer.state.values()} == {1.0}
        assert all(torch.equal(a, b) for a, b in zip(params, snapshot(s.engine)))
        status, err = s.call("/v1/grpo_step", dict(body, step_id="g2", reset_optimizer="yes"))
        assert status == 400 and "reset_optimizer" in json.dumps(err), err
    finally:
        s.close()


@pytest.mark.parametrize("value,want", [(None, False), (False, False), (True, True)])
def test_parse_reset_default(value, want):
    body = {"loss": {"learning_rate": 0.01}, "samples": [{"prompt": {"text": "x"}, "token_ids": [1], "old_logprobs": [-1.0], "advantage": 1.0}]}
    if value is not None:
        body["reset_optimizer"] = value
    from lora_trainer.engine import Limits

    assert protocol.parse_grpo(body, Limits(), 300)["reset_optimizer"] is want
