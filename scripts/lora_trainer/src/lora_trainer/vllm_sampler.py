"""Sampling through vLLM when it is installed and a GPU is present.

The trainer's model stays the policy; vLLM only proposes completions, the way
TRL's vLLM colocate mode does:

- Token ids come from vLLM; their logprobs are recomputed by the trainer's own
  forward pass (Engine.sample), so the importance ratio of grpo_step is exact
  (r = 1 on-policy) whichever engine generated, and a numerical difference
  between the two engines can change which tokens are drawn, never the loss.
- vLLM's weights follow the policy. Every change of the trainer's weights (an
  update, a rolled-back update, a loaded checkpoint) bumps
  Engine.weights_generation; before sampling, a generation vLLM has not seen is
  pushed as merged LoRA weights (W + scale * B A of each adapted layer; the
  other weights never change) and vLLM's prefix cache, which holds keys and
  values of the old weights, is reset.

Without vLLM or without a GPU the plain transformers sampler of Engine is used
(``--sampler auto``); ``--sampler vllm`` then refuses to start, naming why.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

log = logging.getLogger("lora_trainer")

SAMPLERS = ("auto", "transformers", "vllm")


class SamplerUnavailable(Exception):
    """--sampler vllm asked for what this machine or backend cannot give."""


def merged_lora_weights(peft_model: torch.nn.Module) -> List[Tuple[str, torch.Tensor]]:
    """(name, weight) of every LoRA-adapted linear layer with its adapter merged,
    under the base model's parameter names (what a fresh load of the base model
    calls them), leaving the model untouched. Layers without an adapter are not
    listed: their weights are the base model's, which vLLM loaded."""
    out: List[Tuple[str, torch.Tensor]] = []
    for name, module in peft_model.named_modules():
        base = getattr(module, "base_layer", None)
        if base is None or not hasattr(module, "get_delta_weight") or not getattr(module, "active_adapters", None):
            continue
        with torch.no_grad():
            w = base.weight.detach().clone()
            for adapter in module.active_adapters:
                if adapter in getattr(module, "lora_A", {}):
                    w += module.get_delta_weight(adapter).to(w.dtype)
        out.append((base_name(name) + ".weight", w))
    return out


def base_name(peft_name: str) -> str:
    """A PEFT module name as the base model calls it:
    base_model.model.model.layers.0.self_attn.q_proj -> model.layers.0.self_attn.q_proj."""
    prefix = "base_model.model."
    return peft_name[len(prefix):] if peft_name.startswith(prefix) else peft_name


class VLLMGenerator:
    """Draws completions with a vLLM engine whose weights follow the policy.

    llm is a vllm.LLM (or a stand-in with the same generate / apply_model /
    reset_prefix_cache methods, as the CPU tests use); make_params builds a
    vllm.SamplingParams and make_prompt a vllm.TokensPrompt."""

    name = "vllm"

    def __init__(self, llm: Any, make_params: Callable[..., Any], make_prompt: Callable[[List[int]], Any], eos_ids: Sequence[int]):
        self.llm = llm
        self.make_params = make_params
        self.make_prompt = make_prompt
        self.eos_ids = set(eos_ids)
        self.synced_generation = -1  # vLLM holds the base weights: nothing synced yet
        self.syncs = 0

    def sync(self, generation: int, weights: Callable[[], List[Tuple[str, torch.Tensor]]]) -> bool:
        """Push the policy's weights when vLLM has not seen this generation; True if it did."""
        if generation == self.synced_generation:
            return False
        named = weights()

        def load(model):  # runs inside vLLM's worker, on its copy of the model
            model.load_weights(weights=named)

        self.llm.apply_model(load)
        self.llm.reset_prefix_cache()  # cached keys and values are of the old weights
        self.synced_generation = generation
        self.syncs += 1
        log.debug("vllm: weights of generation %d synced (%d tensors)", generation, len(named))
        return True

    def generate(
        self,
        rows: Sequence[Tuple[int, int]],
        prompts: Sequence[List[int]],
        temperature: float,
        top_p: float,
        max_tokens: int,
        stop: Sequence[str],
        seeds: Sequence[int],
    ) -> List[Dict]:
        """The samples of rows [(prompt, sample)], in Engine._generate's shape
        (token_ids without the end-of-sequence token, text cut at a stop string)."""
        params = [
            self.make_params(
                n=1,
                temperature=temperature,
                top_p=top_p if temperature > 0 else 1.0,
                max_tokens=max_tokens,
                stop=list(stop) or None,
                seed=seed,
            )
            for seed in seeds
        ]
        outs = self.llm.generate([self.make_prompt(list(prompts[i])) for i, _ in rows], params, use_tqdm=False)
        if len(outs) != len(rows):
            raise RuntimeError(f"vllm returned {len(outs)} outputs for {len(rows)} prompts")
        results = []
        for (i, j), out in zip(rows, outs):
            c = out.outputs[0]
            tokens = list(c.token_ids)
            finish = c.finish_reason or "length"
            if tokens and tokens[-1] in self.eos_ids and finish == "stop":
                tokens.pop()  # the transformers sampler does not keep it either
            results.append(
                {"prompt_index": i, "sample_index": j, "text": c.text, "token_ids": tokens,
                 "finish_reason": "stop" if finish == "stop" else "length"}
            )
        return results


def vllm_available() -> Tuple[bool, str]:
    """Whether vLLM can serve samples here, and why not."""
    if importlib.util.find_spec("vllm") is None:
        return False, "vllm is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA GPU"
    return True, ""


def build_generator(
    sampler: str,
    backend: Any,
    rank: int,
    gpu_memory_utilization: float = 0.3,
    seed: int = 0,
) -> Optional[VLLMGenerator]:
    """The vLLM generator --sampler asks for, or None for the transformers sampler.
    auto picks vLLM when it can serve: installed, a GPU, the hf backend (vLLM
    loads the base model by its name or path; the tiny and tagger policies
    are not models it knows) and rank 0 (the one rank that serves sample)."""
    if sampler not in SAMPLERS:
        raise SamplerUnavailable(f"--sampler {sampler!r}: must be one of {', '.join(SAMPLERS)}")
    if sampler == "transformers" or rank > 0:
        return None
    ok, why = vllm_available()
    if ok and type(backend).__name__ != "HFBackend":
        ok, why = False, f"vLLM serves the hf backend only, not {type(backend).__name__}"
    if not ok:
        if sampler == "vllm":
            raise SamplerUnavailable(f"--sampler vllm: {why}; use --sampler auto or transformers")
        log.info("sampling with transformers (%s)", why)
        return None
    # In-process engine: load_weights then runs on the very model that samples.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import vllm  # noqa: PLC0415 - optional dependency
    from vllm.inputs import TokensPrompt  # noqa: PLC0415

    dtype = str(next(backend.model.parameters()).dtype).removeprefix("torch.")
    llm = vllm.LLM(
        model=backend.base_model,
        dtype=dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        enable_prefix_caching=True,
        seed=seed,
    )
    log.info("sampling with vLLM %s (%s, gpu_memory_utilization %.2f)", vllm.__version__, dtype, gpu_memory_utilization)
    return VLLMGenerator(llm, vllm.SamplingParams, lambda ids: TokensPrompt(prompt_token_ids=ids), backend.tokenizer.eos_ids)
