"""The vLLM sampler's CPU-testable half (vllm_sampler.py): the merged weights
it pushes, the weight-sync bookkeeping and the fallback choice. vLLM itself
needs a GPU; here a stand-in engine with vLLM's interface holds its own copy
of the base model, loads pushed weights by name into it and decodes greedily,
so its tokens equal the trainer's only if the merged weights and their names
are right. scripts/gpu_check.py runs the real vLLM on a GPU machine."""

import copy
from types import SimpleNamespace
from typing import Dict, List

import pytest
import torch

from lora_trainer import vllm_sampler

from .test_hf_server import LORA, PROMPTS, grpo, logprobs, sample


class StandInModel:
    """vLLM's model interface as the generator uses it: load_weights by base-model name."""

    def __init__(self, model):
        self.model = model
        self.loaded: List[str] = []

    def load_weights(self, weights):
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, w in weights:
                assert name in params, f"pushed {name!r}, which the base model does not have"
                assert params[name].shape == w.shape, name
                params[name].copy_(w)
                self.loaded.append(name)


class StandInLLM:
    """vllm.LLM's generate / apply_model / reset_prefix_cache over a plain
    transformers copy of the base model, greedy at temperature 0."""

    def __init__(self, base_dir: str, eos_ids):
        import transformers

        self.inner = StandInModel(transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval())
        self.eos_ids = set(eos_ids)
        self.resets = 0
        self.calls: List[Dict] = []

    def apply_model(self, fn):
        return [fn(self.inner)]

    def reset_prefix_cache(self):
        self.resets += 1

    def generate(self, prompts, params, use_tqdm=False):
        outs = []
        for ids, p in zip(prompts, params):
            assert p["temperature"] == 0, "the stand-in decodes greedily only"
            self.calls.append(p)
            tokens, finish = [], "length"
            x = torch.tensor([ids])
            with torch.no_grad():
                for _ in range(p["max_tokens"]):
                    t = int(self.inner.model(input_ids=x).logits[0, -1].argmax())
                    tokens.append(t)  # vLLM keeps the end-of-sequence token
                    if t in self.eos_ids:
                        finish = "stop"
                        break
                    x = torch.cat([x, torch.tensor([[t]])], dim=1)
            outs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=tokens, text="", finish_reason=finish)]))
        return outs


def with_stand_in(s, base_dir):
    llm = StandInLLM(base_dir, s.engine.tok.eos_ids)
    s.engine.generator = vllm_sampler.VLLMGenerator(llm, lambda **kw: kw, list, s.engine.tok.eos_ids)
    return llm


def greedy(s, max_tokens=6):
    return [x["token_ids"] for x in sample(s, n=1, temperature=0.0, max_tokens=max_tokens)]


def on_transformers(s, fn):
    """fn() with the trainer's own sampler (the stand-in decodes greedily only)."""
    gen, s.engine.generator = s.engine.generator, None
    try:
        return fn()
    finally:
        s.engine.generator = gen


def transformers_greedy(s, max_tokens=6):
    return on_transformers(s, lambda: greedy(s, max_tokens))


def test_merged_weights_equal_peft_merge(llama_dir, serve):
    s = serve(LORA + ["--base-model", llama_dir, "--sampler", "transformers"])
    xs = [x for x in sample(s) if x["token_ids"]]
    grpo(s, "g1", xs, [1.0, -1.0] * (len(xs) // 2) + [1.0] * (len(xs) % 2))  # B != 0 now
    merged = dict(s.engine.backend.merged_weights())
    reference = copy.deepcopy(s.engine.backend.model).merge_and_unload().state_dict()
    targets = set(s.engine.backend.lora.target_modules)
    assert merged and all(k.rsplit(".", 2)[-2] in targets for k in merged)
    assert len(merged) == 2 * len(targets)  # two layers
    for name, w in merged.items():
        assert torch.allclose(w, reference[name], atol=1e-6, rtol=0), name
    assert any(not torch.equal(w, reference[n]) for n, w in [(n, s.engine.backend.model.get_parameter("base_model.model." + n)) for n in merged])


def test_generator_follows_every_weight_change(llama_dir, serve):
    s = serve(LORA + ["--base-model", llama_dir, "--sampler", "transformers"])
    llm = with_stand_in(s, llama_dir)
    gen = s.engine.generator

    assert greedy(s) == transformers_greedy(s)
    assert (gen.syncs, llm.resets) == (1, 1)  # the first sample syncs
    greedy(s)
    assert gen.syncs == 1  # nothing changed: nothing pushed

    xs = [x for x in on_transformers(s, lambda: sample(s, temperature=1.0)) if x["token_ids"]]
    assert gen.syncs == 1
    before = greedy(s, max_tokens=8)
    for k in range(4):  # move the policy far enough that its greedy tokens change
        grpo(s, f"g{k}", xs, [3.0 if i % 2 else -3.0 for i in range(len(xs))], learning_rate=0.05)
    after = greedy(s, max_tokens=8)
    assert gen.syncs == 2  # once for the four updates, at the next sample
    assert after == transformers_greedy(s, max_tokens=8)
    assert after != before, "the updates did not change the greedy tokens: the test cannot tell a missed sync"

    s.ok("/v1/save", {"step_id": "save", "name": "ck"})
    grpo(s, "g9", xs, [1.0] * len(xs))
    s.ok("/v1/load", {"step_id": "load", "name": "ck"})
    assert greedy(s, max_tokens=8) == after
    assert gen.syncs == 3 and llm.resets == 3

    # The logprobs returned with vLLM's tokens are the trainer's own.
    got = sample(s, n=1, temperature=0.0, max_tokens=8)
    want = logprobs(s, got, temperature=1.0)
    assert [x["logprobs"] for x in got] == want
    assert s.ok("/v1/info")["sampler"] == "vllm"


def test_generator_maps_seeds_and_strips_eos():
    calls = []

    class LLM:
        def generate(self, prompts, params, use_tqdm=False):
            calls.append((prompts, params))
            outs = [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[5, 6, 2], text="a b", finish_reason="stop")]),
                    SimpleNamespace(outputs=[SimpleNamespace(token_ids=[5, 6, 7], text="a b c", finish_reason="length")])]
            return outs[: len(prompts)]

    g = vllm_sampler.VLLMGenerator(LLM(), lambda **kw: kw, list, eos_ids=[2])
    out = g.generate([(0, 0), (1, 3)], [[1, 2], [3]], 0.7, 0.9, 3, ["\n"], [11, 12])
    assert [o["token_ids"] for o in out] == [[5, 6], [5, 6, 7]]
    assert [o["finish_reason"] for o in out] == ["stop", "length"]
    assert [(o["prompt_index"], o["sample_index"]) for o in out] == [(0, 0), (1, 3)]
    prompts, params = calls[0]
    assert prompts == [[1, 2], [3]]
    assert [p["seed"] for p in params] == [11, 12] and all(p["top_p"] == 0.9 and p["stop"] == ["\n"] for p in params)
    # Greedy ignores top_p; no stop strings is None, not [].
    g.generate([(0, 0)], [[1]], 0.0, 0.5, 3, [], [1])
    assert calls[-1][1][0]["top_p"] == 1.0 and calls[-1][1][0]["stop"] is None


def test_sampler_choice(monkeypatch):
    hf_like = type("HFBackend", (), {})()
    tiny = SimpleNamespace()
    monkeypatch.setattr(vllm_sampler, "vllm_available", lambda: (False, "vllm is not installed"))
    assert vllm_sampler.build_generator("auto", hf_like, rank=0) is None
    assert vllm_sampler.build_generator("transformers", hf_like, rank=0) is None
    with pytest.raises(vllm_sampler.SamplerUnavailable, match="vllm is not installed"):
        vllm_sampler.build_generator("vllm", hf_like, rank=0)
    monkeypatch.setattr(vllm_sampler, "vllm_available", lambda: (True, ""))
    with pytest.raises(vllm_sampler.SamplerUnavailable, match="hf backend only"):
        vllm_sampler.build_generator("vllm", tiny, rank=0)
    assert vllm_sampler.build_generator("auto", tiny, rank=0) is None
    assert vllm_sampler.build_generator("vllm", hf_like, rank=1) is None  # rank 0 alone samples
    with pytest.raises(vllm_sampler.SamplerUnavailable, match="must be one of"):
        vllm_sampler.build_generator("fast", hf_like, rank=0)


def test_cli_refuses_vllm_without_it(tmp_path, capsys):
    from lora_trainer.cli import main

    if vllm_sampler.vllm_available()[0]:
        pytest.skip("vLLM can serve here: the refusal is for machines without it")
    rc = main(["--backend", "tiny", "--sampler", "vllm", "--device", "cpu", "--port", "0",
               "--checkpoint-dir", str(tmp_path / "ck")])
    assert rc == 2
    assert "--sampler vllm:" in capsys.readouterr().err
