"""The policy engine: sampling, scoring and the updates of the protocol, on any backend.

A backend (tiny.TinyBackend, hf.HFBackend) supplies the model and tokenizer;
everything the protocol specifies — batching, logprobs, the SFT and GRPO
updates, the optimizer, save/load — lives here once for both.

Batches are laid out as [left-padded prompt | right-padded completion], so the
completion of every row starts at the same column P and its predictions are
logits[:, P-1 : P-1+C].
"""

import copy
import hashlib
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from . import distributed, losses

log = logging.getLogger("lora_trainer")

IMPLEMENTATION = "himes-lora-reference"


class ArgumentError(ValueError):
    """A request field is invalid; the message names the field."""


class NumericError(RuntimeError):
    """A non-finite loss or gradient: nothing was applied."""


class CheckpointError(RuntimeError):
    """A checkpoint fails its checksum or cannot be read: nothing was loaded."""


class StartupError(RuntimeError):
    """The server cannot start with these flags (a model or adapter directory
    that is missing files, does not load, or does not fit); the message names
    the path. Nothing has been written."""


# Request limits (info.limits); 0 = none, which lets one request exhaust the
# server (a sample with n = 10^7), so the defaults are set.
DEFAULT_LIMITS = {"max_prompts": 1024, "max_n": 128, "max_tokens": 1024, "max_batch": 8192}


@dataclass
class Limits:
    max_prompts: int = DEFAULT_LIMITS["max_prompts"]
    max_n: int = DEFAULT_LIMITS["max_n"]
    max_tokens: int = DEFAULT_LIMITS["max_tokens"]
    max_batch: int = DEFAULT_LIMITS["max_batch"]

    def as_dict(self) -> Dict[str, int]:
        return {"max_prompts": self.max_prompts, "max_n": self.max_n, "max_tokens": self.max_tokens, "max_batch": self.max_batch}


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, P+C]
    attention_mask: torch.Tensor  # [B, P+C]
    position_ids: torch.Tensor  # [B, P+C]
    targets: torch.Tensor  # [B, C] completion tokens (pad where mask is 0)
    mask: torch.Tensor  # [B, C] float, 1 on real completion tokens
    prompt_len: int  # P
    prompts: "Prompts"  # the distinct prompts, padded to P, and which one each row has


@dataclass
class Prompts:
    """The distinct prompts of a batch, left-padded to the batch's P, and which one each row has:
    rows that share a prompt (a group's G samples) share its forward pass."""

    input_ids: torch.Tensor  # [U, P]
    attention_mask: torch.Tensor  # [U, P]
    position_ids: torch.Tensor  # [U, P]
    row: torch.Tensor  # [B] long, index into the U prompts


@dataclass
class SFTPlan:
    """An sft_step cut into units; nll_sum(unit) is the unit's summed NLL
    (None: no supervised token), total the request's supervised tokens."""

    units: List[Any]
    total: int
    nll_sum: Callable[[Any], Optional[torch.Tensor]]


@dataclass
class GRPORows:
    """One unit's rows for the clipped surrogate, [R, C] (adv [R])."""

    logp: torch.Tensor  # with the graph
    old: torch.Tensor
    adv: torch.Tensor
    mask: torch.Tensor
    entropy: torch.Tensor  # per token, no graph


@dataclass
class GRPOPlan:
    """A grpo_step cut into units. forward(unit) gives its rows (None: no
    tokens); reference(unit), run without gradient, its reference logprobs;
    begin, if set, runs first inside the call and returns what undoes it
    should the call fail."""

    units: List[Any]
    norm: losses.Normalizer
    loss_type: str
    temperature: float
    reference: Callable[[Any], Optional[torch.Tensor]]
    forward: Callable[[Any], Optional[GRPORows]]
    begin: Optional[Callable[[], Optional[Callable[[], None]]]] = None


def render_plain(messages: Sequence[Dict[str, str]]) -> str:
    """A chat rendering for tokenizers without a chat template."""
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "


def sample_seed(seed: int, i: int, j: int) -> int:
    """The random stream of sample j of prompt i: a pure function of (seed, i, j)."""
    h = hashlib.sha256(f"{seed}:{i}:{j}".encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


class Engine:
    def __init__(
        self,
        backend,
        micro_batch_size: int = 0,
        default_max_tokens: int = 128,
        weight_decay: float = 0.0,
        limits: Optional[Limits] = None,
        max_prompt_tokens: int = 0,
    ):
        self.backend = backend
        self.max_prompt_tokens = max_prompt_tokens
        self.tok = backend.tokenizer
        self.micro_batch_size = micro_batch_size
        self.limits = limits or Limits()
        # A request that leaves max_tokens 0 must not get more than the advertised limit.
        self.default_max_tokens = min(default_max_tokens, self.limits.max_tokens or default_max_tokens)
        self.policy_version = 0
        # Bumped by every change of the weights (an update, a rolled-back
        # update, a loaded checkpoint): a vLLM generator syncs when it differs.
        self.weights_generation = 0
        # vllm_sampler.VLLMGenerator when --sampler picks vLLM; None samples here.
        self.generator = None
        # A backend that can copy a cache between rows computes each distinct
        # prompt of a batch once (see _prefill); the others run every row.
        self.share_prompts = hasattr(backend, "expand_cache")
        self.params = backend.trainable_parameters()
        # The learning rate and weight decay are set per call (the protocol
        # sends them; a request's weight_decay 0 means this default). AdamW
        # with weight_decay 0 is Adam.
        self.default_weight_decay = weight_decay
        self.optimizer = torch.optim.AdamW(self.params, lr=1e-4, weight_decay=weight_decay)
        # One process unless the server runs under torchrun (cli sets it).
        self.dist: distributed.Single = distributed.Single()

    # ------------------------------------------------------------------ prompts

    def encode_prompt(self, prompt: Dict, where: str) -> List[int]:
        """Token ids of a protocol Prompt, identical in every call that takes one."""
        messages = prompt.get("messages") or None
        text = prompt.get("text") or ""
        if not messages and not text and prompt.get("dialogue"):
            # LLM endpoints may ignore dialogue; when it is all we have, render it as chat.
            d = prompt["dialogue"]
            messages = list(d.get("history") or []) + [{"role": "user", "content": d.get("question", "")}]
        if not messages and not text:
            raise ArgumentError(f"{where}: empty prompt (text, messages and dialogue are all empty)")
        ids = self.tok.encode_prompt(text, messages)
        if not ids:
            raise ArgumentError(f"{where}: the prompt encodes to no tokens")
        if self.max_prompt_tokens and len(ids) > self.max_prompt_tokens:
            # Keep the end: the current question and the most recent turns.
            ids = ids[-self.max_prompt_tokens :]
        return ids

    # ------------------------------------------------------------------ batching

    def _check_context(self, prompt_len: int, completion_len: int, where: str) -> None:
        limit = self.backend.max_positions
        if limit and prompt_len + completion_len > limit:
            raise ArgumentError(
                f"{where}: {prompt_len} prompt tokens + {completion_len} completion tokens exceed the model's context of {limit}"
            )

    def _batch(self, prompts: Sequence[List[int]], completions: Sequence[List[int]]) -> Batch:
        dev = self.backend.device
        p = max(len(x) for x in prompts)
        c = max((len(x) for x in completions), default=0)
        pad = self.tok.pad_id
        ids, attn, tgt, cmask = [], [], [], []
        for pr, co in zip(prompts, completions):
            ids.append([pad] * (p - len(pr)) + list(pr) + list(co) + [pad] * (c - len(co)))
            attn.append([0] * (p - len(pr)) + [1] * (len(pr) + len(co)) + [0] * (c - len(co)))
            tgt.append(list(co) + [pad] * (c - len(co)))
            cmask.append([1.0] * len(co) + [0.0] * (c - len(co)))
        input_ids = torch.tensor(ids, dtype=torch.long, device=dev)
        attention_mask = torch.tensor(attn, dtype=torch.long, device=dev)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        seen: Dict[Tuple[int, ...], int] = {}
        row, firsts = [], []  # each row's distinct prompt; the first row of each distinct prompt
        for r, pr in enumerate(prompts):
            u = seen.setdefault(tuple(pr), len(seen))
            if u == len(firsts):
                firsts.append(r)
            row.append(u)
        return Batch(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            targets=torch.tensor(tgt, dtype=torch.long, device=dev).view(len(prompts), c),
            mask=torch.tensor(cmask, dtype=torch.float32, device=dev).view(len(prompts), c),
            prompt_len=p,
            prompts=Prompts(
                input_ids=input_ids[firsts, :p],
                attention_mask=attention_mask[firsts, :p],
                position_ids=position_ids[firsts, :p],
                row=torch.tensor(row, dtype=torch.long, device=dev),
            ),
        )

    def _prefill(self, batch: Batch):
        """The forward pass of each distinct prompt once, copied to its rows:
        (the logits predicting each row's first completion token [B, 1, V], its cache)."""
        pr = batch.prompts
        logits, past = self.backend.forward(pr.input_ids, pr.attention_mask, pr.position_ids, use_cache=True, keep_last=1)
        return logits[:, -1:].index_select(0, pr.row), self.backend.expand_cache(past, pr.row)

    def _completion_logits(self, batch: Batch, prefill=None) -> torch.Tensor:
        """The logits that predict the completion tokens, [B, C, V].
        prefill: _prefill(batch)'s result when the caller has it (sample)."""
        c = batch.targets.shape[1]
        if c > 0 and self.share_prompts:
            # The prompt once per distinct prompt, then the completions on its
            # cache: the same function as one pass over prompt + completion.
            first, past = prefill if prefill is not None else self._prefill(batch)
            if c == 1:
                return first
            p = batch.prompt_len
            rest, _ = self.backend.forward(
                batch.input_ids[:, p : p + c - 1],
                batch.attention_mask[:, : p + c - 1],
                batch.position_ids[:, p : p + c - 1],
                past=past,
            )
            return torch.cat([first, rest], dim=1)
        # Completions are right-aligned up to padding, so the last c+1 positions
        # hold every prediction we need: the prompt's logits (vocabulary-wide,
        # the largest tensor of a forward pass) are never materialized.
        logits, _ = self.backend.forward(batch.input_ids, batch.attention_mask, batch.position_ids, keep_last=c + 1)
        if logits.shape[1] == c + 1:
            return logits[:, :c]
        return logits[:, batch.prompt_len - 1 : batch.prompt_len - 1 + c]  # a backend that returned all positions

    def _chunks(self, n: int) -> List[range]:
        size = self.micro_batch_size if self.micro_batch_size > 0 else n
        return [range(s, min(s + size, n)) for s in range(0, n, size)]

    # ------------------------------------------------------------------ read-only calls

    @torch.no_grad()
    def logprobs(self, prompts: Sequence[List[int]], completions: Sequence[List[int]], temperature: float) -> List[List[float]]:
        """logprob of every completion token under softmax(logits / T), in eval mode."""
        self.backend.train(False)
        out: List[List[float]] = []
        for rows in self._chunks(len(prompts)):
            out.extend(self._chunk_logprobs([prompts[k] for k in rows], [completions[k] for k in rows], temperature))
        return out

    def _chunk_logprobs(self, ps, cs, temperature: float, prefill=None) -> List[List[float]]:
        if max(len(x) for x in cs) == 0:
            return [[] for _ in cs]
        b = self._batch(ps, cs)
        lp = losses.token_logprobs(self._completion_logits(b, prefill), b.targets, temperature)
        return [[min(float(v), 0.0) for v in lp[r, : len(co)].tolist()] for r, co in enumerate(cs)]

    @torch.no_grad()
    def sample(
        self,
        prompts: Sequence[List[int]],
        n: int,
        temperature: float,
        top_p: float,
        max_tokens: int,
        stop: Sequence[str],
        seed: int,
    ) -> List[Dict]:
        """n samples per prompt, in (prompt, sample) order; see PROTOCOL.md /v1/sample."""
        self.backend.train(False)
        max_tokens = max_tokens or self.default_max_tokens
        for i, p in enumerate(prompts):
            self._check_context(len(p), max_tokens, f"prompts[{i}]")
        rows = [(i, j) for i in range(len(prompts)) for j in range(n)]
        results: List[Dict] = []
        for chunk in self._chunks(len(rows)):
            if self.generator is not None:
                self.generator.sync(self.weights_generation, self.backend.merged_weights)
                part_rows = [rows[k] for k in chunk]
                seeds = [sample_seed(seed, i, j) for i, j in part_rows]
                part, prefill = self.generator.generate(part_rows, prompts, temperature, top_p, max_tokens, stop, seeds), None
            else:
                part, prefill = self._generate([rows[k] for k in chunk], prompts, temperature, top_p, max_tokens, stop, seed)
            # Logprobs come from a fresh forward pass over the completions (on
            # the prompts' cache of the prefill when the backend shares
            # prompts): the computation grpo_step uses for its ratio, so r = 1 on-policy.
            lps = self._chunk_logprobs(
                [prompts[r["prompt_index"]] for r in part], [r["token_ids"] for r in part], temperature or 1.0, prefill
            )
            for r, lp in zip(part, lps):
                r["logprobs"] = lp
                r["policy_version"] = self.policy_version
            results.extend(part)
        return results

    def _generate(self, rows, prompts, temperature, top_p, max_tokens, stop, seed):
        """The samples of rows [(prompt, sample)] and the prefill they started from (None without share_prompts)."""
        dev = self.backend.device
        b = self._batch([prompts[i] for i, _ in rows], [[] for _ in rows])
        attn, pos = b.attention_mask, b.position_ids
        gens = [torch.Generator().manual_seed(sample_seed(seed, i, j)) for i, j in rows]
        prefill = None
        if self.share_prompts:
            prefill = self._prefill(b)  # each prompt once for its n samples, reused for the logprobs
            logits, past = prefill
        else:
            logits, past = self.backend.forward(b.input_ids, attn, pos, use_cache=True, keep_last=1)
        last = logits[:, -1].float()
        tokens: List[List[int]] = [[] for _ in rows]
        finish: List[Optional[str]] = [None] * len(rows)
        texts: List[Optional[str]] = [None] * len(rows)
        for step in range(max_tokens):
            nxt = self._choose(last, temperature, top_p, gens)
            for r, t in enumerate(nxt.tolist()):
                if finish[r] is not None:
                    continue
                if t in self.tok.eos_ids:
                    finish[r] = "stop"
                    continue
                tokens[r].append(t)
                if stop:
                    text = self.tok.decode(tokens[r])
                    cut = min((text.find(s) for s in stop if s and s in text), default=-1)
                    if cut >= 0:
                        finish[r], texts[r] = "stop", text[:cut]
            if step == max_tokens - 1 or all(f is not None for f in finish):
                break
            # Finished rows keep decoding into ignored positions; rows never see each other.
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
            pos = pos[:, -1:] + 1
            logits, past = self.backend.forward(nxt.to(dev).unsqueeze(1), attn, pos, past=past, use_cache=True)
            last = logits[:, -1].float()
        out = []
        for r, (i, j) in enumerate(rows):
            text = texts[r] if texts[r] is not None else self.tok.decode(tokens[r])
            out.append(
                {
                    "prompt_index": i,
                    "sample_index": j,
                    "text": text,
                    "token_ids": tokens[r],
                    "finish_reason": finish[r] or "length",
                }
            )
        return out, prefill

    @staticmethod
    def _choose(logits: torch.Tensor, temperature: float, top_p: float, gens) -> torch.Tensor:
        """Next token per row: argmax at T = 0, else inverse-CDF sampling of the
        (top-p truncated) softmax(logits / T) with one uniform per row from the
        row's own CPU generator, so a row's draw does not depend on its batch or device."""
        if temperature == 0:
            return logits.argmax(-1).cpu()
        probs = torch.softmax(logits / temperature, dim=-1)
        sp, si = probs.sort(dim=-1, descending=True)
        if top_p < 1.0:
            # Keep the smallest prefix whose mass reaches top_p (the top token always).
            sp = sp * ((sp.cumsum(-1) - sp) < top_p).to(sp.dtype)
        cum = sp.cumsum(-1)
        u = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in gens]).to(cum.device)
        u = (u * cum[:, -1].double()).to(cum.dtype).unsqueeze(-1)
        idx = torch.searchsorted(cum, u, right=True).clamp(max=cum.shape[-1] - 1)
        # A zero-probability token can only be hit through rounding at the top end.
        idx = torch.minimum(idx, (sp > 0).sum(-1, keepdim=True) - 1)
        return si.gather(-1, idx).squeeze(-1).cpu()

    # ------------------------------------------------------------------ updates

    def _snapshot(self):
        """What a failed call must restore so that nothing is applied."""
        return (
            [p.detach().clone() for p in self.params],
            copy.deepcopy(self.optimizer.state_dict()),
            self._rng_state(),
        )

    def _restore(self, snap) -> None:
        params, opt, rng = snap
        with torch.no_grad():
            for p, v in zip(self.params, params):
                p.copy_(v)
        self.weights_generation += 1
        self.optimizer.load_state_dict(opt)
        self._set_rng_state(rng)
        self.optimizer.zero_grad(set_to_none=True)

    def _apply(self, fn):
        snap = self._snapshot()
        try:
            return fn()
        except BaseException:
            self._restore(snap)
            raise
        finally:
            self.backend.train(False)

    def _optimizer_step(self, lr: float, max_grad_norm: float, loss: float, what: str, weight_decay: Optional[float] = None) -> float:
        """Clip and apply the accumulated gradient (summed over the data-parallel
        ranks first: every rank then takes the same step)."""
        self.dist.all_reduce_grads(self.params)
        with_grad = [p for p in self.params if p.grad is not None]
        if with_grad:
            norm = float(torch.nn.utils.clip_grad_norm_(with_grad, max_grad_norm if max_grad_norm > 0 else float("inf")))
        else:
            norm = 0.0
        if not (math.isfinite(loss) and math.isfinite(norm)):
            raise NumericError(f"{what}: non-finite loss {loss} or gradient norm {norm}; nothing was applied")
        for g in self.optimizer.param_groups:
            g["lr"] = lr
            # None: the request left it unset (the endpoint's default); 0 is Adam.
            g["weight_decay"] = self.default_weight_decay if weight_decay is None else weight_decay
        self.optimizer.step()
        self.weights_generation += 1
        return norm

    # The one implementation of the two updates, for every backend. A
    # backend's engine says how to cut a request into units (micro-batches
    # for token models, prompt groups for the tagger) and how to run one
    # unit's forward pass (_sft_plan, _grpo_plan); the loop, the loss from
    # losses.py, backward, the data-parallel reduction, clipping, the AdamW
    # step, the learning rate and the optimizer reset live here once.

    def sft_step(
        self,
        examples: Sequence[Tuple[Any, Any]],
        learning_rate: float,
        epochs: int,
        max_grad_norm: float,
        weight_decay: Optional[float] = None,
    ) -> Dict:
        """`epochs` full-batch AdamW steps on the mean NLL of the supervised tokens (see _sft_plan)."""
        plan = self._sft_plan(examples)
        mine = self.dist.shard(plan.units)

        def run():
            epoch_losses, norm = [], 0.0
            for e in range(epochs):
                if plan.total == 0:
                    epoch_losses.append(0.0)
                    continue
                self.optimizer.zero_grad(set_to_none=True)
                self.backend.train(True)
                loss_value = 0.0
                for unit in mine:
                    nll = plan.nll_sum(unit)
                    if nll is None:
                        continue
                    part = nll / plan.total  # the whole request's count: the parts add up to the mean
                    part.backward()
                    loss_value += float(part.detach())
                (loss_value,) = self.dist.sum_floats([loss_value])
                norm = self._optimizer_step(learning_rate, max_grad_norm, loss_value, f"sft_step epoch {e}", weight_decay)
                epoch_losses.append(loss_value)
            self.policy_version += 1
            return {"loss": sum(epoch_losses) / len(epoch_losses), "tokens": plan.total, "grad_norm": norm}

        return self._apply(run)

    def grpo_step(self, samples: Sequence[Dict], loss: Dict, reset_optimizer: bool = False) -> Dict:
        """μ clipped-surrogate AdamW steps on one batch; see losses.py for the formulas.

        samples: dicts with prompt_ids, token_ids, old_logprobs, advantage.
        loss: the request's LossConfig with defaults applied (protocol.parse_loss);
        max_length and weight_decay None mean the longest sample and the endpoint's default.
        reset_optimizer: discard the AdamW state (moments and step count) first,
        as if the optimizer were new (the first RL step after SFT).
        """
        plan = self._grpo_plan(samples, loss)
        mine = self.dist.shard(plan.units)
        temperature = plan.temperature
        kl_coef = loss["kl_coef"]
        tokens = max(plan.norm.total_tokens, 1)
        undo: List[Callable[[], None]] = []

        def run():
            if reset_optimizer:
                self.reset_optimizer()
            if plan.begin is not None:
                undo.extend(u for u in [plan.begin()] if u is not None)
            # The reference does not change during the call: one forward per unit.
            refs: List[Optional[torch.Tensor]] = []
            for unit in mine:
                ref = None
                if kl_coef != 0:
                    with torch.no_grad():
                        ref = plan.reference(unit)
                refs.append(ref)
            sums = {"loss": 0.0, "kl": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0, "clip_frac_dual": 0.0,
                    "grad_norm": 0.0, "entropy": 0.0}
            for it in range(loss["mu"]):
                self.optimizer.zero_grad(set_to_none=True)
                self.backend.train(True)
                loss_value, kl_sum, low, high, dual, ent = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
                for unit, ref in zip(mine, refs):
                    rows = plan.forward(unit)
                    if rows is None:
                        continue  # no tokens: contributes 0, still counts in B
                    terms = losses.grpo_token_terms(
                        rows.logp, rows.old, rows.adv, rows.mask, loss["clip_low"], loss["clip_high"], kl_coef, ref,
                        clip_ratio_c=loss.get("clip_ratio_c", 0.0), kl_estimator=loss.get("kl_estimator", "k3"),
                    )
                    part = losses.aggregate(plan.loss_type, terms.loss, rows.mask, plan.norm)
                    part.backward()
                    loss_value += float(part.detach())
                    kl_sum += terms.kl_sum
                    low += terms.clip_low
                    high += terms.clip_high
                    dual += terms.clip_dual
                    ent += float((rows.entropy * rows.mask).sum())
                loss_value, kl_sum, low, high, dual, ent = self.dist.sum_floats([loss_value, kl_sum, low, high, dual, ent])
                g = self._optimizer_step(
                    loss["learning_rate"], loss["max_grad_norm"], loss_value, f"grpo_step iteration {it}", loss.get("weight_decay")
                )
                for k, v in (("loss", loss_value), ("kl", kl_sum / tokens), ("clip_frac_low", low / tokens),
                             ("clip_frac_high", high / tokens), ("clip_frac_dual", dual / tokens), ("grad_norm", g),
                             ("entropy", ent / tokens)):
                    sums[k] += v
            self.policy_version += 1
            out = {k: v / loss["mu"] for k, v in sums.items()}
            out["tokens"] = plan.norm.total_tokens
            return out

        try:
            return self._apply(run)
        except BaseException:
            for u in undo:
                u()  # the call was not applied: nor is what its begin did
            raise

    def reset_optimizer(self) -> None:
        """Forget the AdamW moments and step count, as a freshly built optimizer has none."""
        self.optimizer.state.clear()

    # --- the token models' units: micro-batches of rows

    def _update_chunks(self, n: int) -> List[range]:
        """The micro-batches of an update. Without --micro-batch-size, one per
        data-parallel rank (one in all for one process)."""
        if self.micro_batch_size <= 0 and self.dist.world_size > 1:
            size = max(1, -(-n // self.dist.world_size))
            return [range(s, min(s + size, n)) for s in range(0, n, size)]
        return self._chunks(n)

    def _sft_plan(self, examples: Sequence[Tuple[List[int], List[int]]]) -> "SFTPlan":
        """Masked cross-entropy on completion tokens (+ EOS), over micro-batches."""
        prompts = [p for p, _ in examples]
        comps = [list(c) + [self.tok.eos_id] for _, c in examples]
        for k, (p, c) in enumerate(zip(prompts, comps)):
            self._check_context(len(p), len(c), f"examples[{k}]")

        def nll_sum(rows: range) -> torch.Tensor:
            b = self._batch([prompts[k] for k in rows], [comps[k] for k in rows])
            return losses.sft_nll_sum(self._completion_logits(b), b.targets, b.mask)

        return SFTPlan(units=self._update_chunks(len(examples)), total=sum(len(c) for c in comps), nll_sum=nll_sum)

    def _grpo_plan(self, samples: Sequence[Dict], loss: Dict) -> "GRPOPlan":
        n = len(samples)
        lengths = [len(s["token_ids"]) for s in samples]
        for k, s in enumerate(samples):
            self._check_context(len(s["prompt_ids"]), lengths[k], f"samples[{k}]")
        chunks = self._update_chunks(n)
        loss_type = loss["type"]
        if loss_type == "bnpo" and self.micro_batch_size <= 0:
            loss_type = "dapo"  # the request is one micro-batch: bnpo is dapo, however many ranks share it
        norm = losses.Normalizer(
            batch_size=n,
            total_tokens=sum(lengths),
            max_length=max(lengths) if loss.get("max_length") is None else loss["max_length"],
            micro_batches=len(chunks),
        )
        temperature = loss["temperature"]
        dev = self.backend.device

        def tensors(rows):
            b = self._batch([samples[k]["prompt_ids"] for k in rows], [samples[k]["token_ids"] for k in rows])
            c = b.targets.shape[1]
            old = torch.tensor(
                [list(samples[k]["old_logprobs"]) + [0.0] * (c - lengths[k]) for k in rows], dtype=torch.float32, device=dev
            ).view(len(rows), c)
            adv = torch.tensor([samples[k]["advantage"] for k in rows], dtype=torch.float32, device=dev)
            return b, old, adv

        def reference(rows) -> Optional[torch.Tensor]:
            if max(lengths[k] for k in rows) == 0:
                return None
            b, _, _ = tensors(rows)
            with self.backend.adapter_disabled():
                self.backend.train(False)
                return losses.token_logprobs(self._completion_logits(b), b.targets, temperature)

        def forward(rows) -> Optional[GRPORows]:
            if max(lengths[k] for k in rows) == 0:
                return None
            b, old, adv = tensors(rows)
            logits = self._completion_logits(b)
            with torch.no_grad():
                ent = losses.entropy(logits.detach(), temperature)
            return GRPORows(losses.token_logprobs(logits, b.targets, temperature), old, adv, b.mask, ent)

        return GRPOPlan(units=chunks, norm=norm, loss_type=loss_type, temperature=temperature,
                        reference=reference, forward=forward)

    # ------------------------------------------------------------------ state

    def _rng_state(self) -> Dict:
        state = {"cpu": torch.get_rng_state()}
        if self.backend.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.backend.device)
        return state

    def _set_rng_state(self, state: Dict) -> None:
        torch.set_rng_state(state["cpu"])
        if "cuda" in state and self.backend.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda"], self.backend.device)

    def save_to(self, directory: str, run_id: str = "") -> None:
        """Write adapter, optimizer, RNG state, version and run id into an empty
        directory, with the SHA-256 of every file in state.json and of
        state.json's own content in its "checksum" field."""
        adapter = os.path.join(directory, "adapter")
        os.makedirs(adapter)
        self.backend.save_adapter(adapter)
        tensors, rest = split_optimizer_state(self.optimizer.state_dict())
        torch.save(tensors, os.path.join(directory, "optimizer.pt"))
        with open(os.path.join(directory, "optimizer.json"), "w", encoding="utf-8") as f:
            json.dump(rest, f)
        torch.save(self._rng_state(), os.path.join(directory, "rng.pt"))
        meta = {
            "implementation": IMPLEMENTATION,
            "base_model": self.backend.base_model,
            "adapter": self.backend.adapter_info(),
            "policy_version": self.policy_version,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "run_id": run_id,
            "files": file_digests(directory),
        }
        meta["checksum"] = meta_digest(meta)
        with open(os.path.join(directory, "state.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2)

    def load_from(self, directory: str) -> int:
        """Restore what save_to wrote; on any failure the current policy is kept.
        A checkpoint whose files or metadata do not match their checksums is
        refused (CheckpointError); one written before checksums loads unverified."""
        meta = read_meta(directory)
        verify_checkpoint(directory, meta)
        if meta.get("base_model") != self.backend.base_model or comparable_adapter(meta.get("adapter")) != comparable_adapter(self.backend.adapter_info()):
            raise ArgumentError(
                f"checkpoint {directory} was saved for base model {meta.get('base_model')!r} with adapter "
                f"{meta.get('adapter')}; this server runs {self.backend.base_model!r} with {self.backend.adapter_info()}"
            )
        with open(os.path.join(directory, "optimizer.json"), encoding="utf-8") as f:
            rest = json.load(f)
        tensors = torch.load(os.path.join(directory, "optimizer.pt"), map_location=self.backend.device, weights_only=True)
        opt = join_optimizer_state(tensors, rest)
        rng = torch.load(os.path.join(directory, "rng.pt"), map_location="cpu", weights_only=True)
        snap = self._snapshot()
        try:
            self.backend.load_adapter(os.path.join(directory, "adapter"))
            self.optimizer.load_state_dict(opt)
            self._set_rng_state(rng)
        except BaseException:
            self._restore(snap)
            raise
        self.weights_generation += 1
        self.policy_version = int(meta["policy_version"])
        return self.policy_version


def comparable_adapter(info) -> object:
    """adapter_info for comparison: the order of target_modules does not matter
    (checkpoints saved before they were sorted list them as given)."""
    if isinstance(info, dict) and isinstance(info.get("target_modules"), list):
        return dict(info, target_modules=sorted(info["target_modules"]))
    return info


def file_digests(directory: str) -> Dict[str, str]:
    """SHA-256 of every file under directory (but state.json), by relative path."""
    out = {}
    for d, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(d, name)
            rel = os.path.relpath(path, directory).replace(os.sep, "/")
            if rel == "state.json":
                continue
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            out[rel] = "sha256:" + h.hexdigest()
    return dict(sorted(out.items()))


def meta_digest(meta: Dict) -> str:
    body = {k: v for k, v in meta.items() if k != "checksum"}
    raw = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def read_meta(directory: str) -> Dict:
    path = os.path.join(directory, "state.json")
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"checkpoint {directory}: state.json: {e}") from e
    if not isinstance(meta, dict) or not isinstance(meta.get("policy_version"), int):
        raise CheckpointError(f"checkpoint {directory}: state.json: no integer policy_version")
    return meta


def verify_checkpoint(directory: str, meta: Dict) -> None:
    """Refuse a checkpoint whose metadata or files differ from their checksums."""
    if "checksum" not in meta and "files" not in meta:
        log.warning("checkpoint %s predates checksums: loading it unverified", directory)
        return
    if meta.get("checksum") != meta_digest(meta):
        raise CheckpointError(f"checkpoint {directory}: state.json does not match its checksum: it was modified or damaged")
    files = meta.get("files")
    if not isinstance(files, dict):
        raise CheckpointError(f"checkpoint {directory}: state.json: no file checksums")
    got = file_digests(directory)
    for rel, want in files.items():
        if rel not in got:
            raise CheckpointError(f"checkpoint {directory}: {rel} is missing")
        if got[rel] != want:
            raise CheckpointError(f"checkpoint {directory}: {rel} does not match its checksum ({got[rel]}, saved {want}): "
                                  "it was modified or damaged")


def split_optimizer_state(sd: Dict) -> Tuple[Dict[str, torch.Tensor], Dict]:
    """An optimizer state_dict as (tensors, JSON). Checkpoints are read with
    torch.load(weights_only=True), which on PyTorch 1.13 accepts tensors but
    not pickled floats, so everything that is not a tensor goes to JSON."""
    tensors: Dict[str, torch.Tensor] = {}
    scalars: Dict[str, object] = {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            (tensors if torch.is_tensor(v) else scalars)[f"{pid}/{k}"] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def join_optimizer_state(tensors: Dict[str, torch.Tensor], rest: Dict) -> Dict:
    state: Dict[int, Dict] = {}
    for key, v in list(tensors.items()) + list(rest["scalars"].items()):
        pid, k = key.split("/", 1)
        state.setdefault(int(pid), {})[k] = v
    return {"state": state, "param_groups": rest["param_groups"]}
