"""The tiny backend: a small causal transformer with hand-written LoRA layers.

Plain PyTorch (runs on Debian's PyTorch 1.13 and on 2.x), random weights from
a seed, a byte-level vocabulary. It lets the server, its losses and the
protocol be tested on a CPU and in CI without transformers, peft or weights.
It is not meant to produce useful text.
"""

import contextlib
import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

# Byte-level vocabulary: ids 0..255 are bytes, then the special tokens.
BOS_ID = 256
EOS_ID = 257
PAD_ID = 258
VOCAB_SIZE = 259

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj")


class ByteTokenizer:
    """UTF-8 bytes as tokens. A prompt starts with BOS; completions carry no specials."""

    eos_ids = frozenset([EOS_ID])
    eos_id = EOS_ID
    pad_id = PAD_ID
    vocab_size = VOCAB_SIZE

    def encode(self, text: str) -> List[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        # Sampled bytes need not be valid UTF-8; replace rather than fail.
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def encode_prompt(self, text: str, messages: Optional[List[Dict[str, str]]]) -> List[int]:
        if messages:
            # A minimal chat template: one "role: content" line per message,
            # then the generation prompt.
            text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
        return [BOS_ID] + self.encode(text)


@dataclass
class LoRAConfig:
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: List[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))


class LoRALinear(nn.Module):
    """y = W x + b + (alpha/r) * B A dropout(x); W, b frozen, A random, B zero.

    With B = 0 at init the adapted model starts equal to the base model, so
    the reference (adapter disabled) and the policy agree until the first update.
    """

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # PEFT's default init
        self.scaling = alpha / rank
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.enabled = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        if self.enabled:
            y = y + (self.dropout(x) @ self.lora_A.t() @ self.lora_B.t()) * self.scaling
        return y


@dataclass
class TinyModelConfig:
    vocab_size: int = VOCAB_SIZE
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 256
    max_positions: int = 4096
    seed: int = 0


KVCache = List[Tuple[torch.Tensor, torch.Tensor]]


def attention_bias(attention_mask: torch.Tensor, t: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask of t queries (the last t positions) over all keys: [B, 1, t, keys].

    0 where a query may look (a real key at or before it), the dtype's most
    negative finite value elsewhere: a padding query, which has no real key,
    then attends uniformly instead of giving NaN (its output is never read),
    and a real query gives exp(min - max) = 0 to every masked key, as with -inf.
    One token (decoding) needs only the key padding: every key precedes it.
    """
    total = attention_mask.shape[1]
    neg = torch.finfo(dtype).min
    pad = (1 - attention_mask.to(dtype)) * neg  # [B, keys]
    if t == 1:
        return pad[:, None, None, :]
    q_idx = torch.arange(total - t, total, device=attention_mask.device).unsqueeze(1)
    k_idx = torch.arange(total, device=attention_mask.device).unsqueeze(0)
    causal = (k_idx > q_idx).to(dtype) * neg  # [t, keys]
    # Either term alone is already the minimum; clamp keeps their sum finite.
    return (pad[:, None, None, :] + causal).clamp(min=neg)


# Queries per block of causal_attention: [B, heads, 128, keys] scores stay
# small enough for the CPU's caches.
QUERY_BLOCK = 128


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T + bias) v for the last t = q.shape[2] of k's positions.

    In blocks of queries, each over the keys up to its last query only: the
    keys after it are masked for every query of the block (weight exactly 0),
    so this is the full product with the masked upper triangle skipped.
    """
    t, past = q.shape[2], k.shape[2] - q.shape[2]
    if t <= QUERY_BLOCK:
        return torch.softmax(q @ k.transpose(-1, -2) + bias, dim=-1) @ v
    out = []
    for q0 in range(0, t, QUERY_BLOCK):
        q1 = min(q0 + QUERY_BLOCK, t)
        e = past + q1
        att = torch.softmax(q[:, :, q0:q1] @ k[:, :, :e].transpose(-1, -2) + bias[:, :, q0:q1, :e], dim=-1)
        out.append(att @ v[:, :, :e])
    return torch.cat(out, dim=2)


class Block(nn.Module):
    def __init__(self, cfg: TinyModelConfig):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(d)
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.o_proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.up_proj = nn.Linear(d, cfg.d_ff)
        self.down_proj = nn.Linear(cfg.d_ff, d)

    def forward(self, x, bias, past: Optional[Tuple[torch.Tensor, torch.Tensor]]):
        b, t, d = x.shape
        h = self.n_heads
        hd = d // h
        y = self.ln1(x)
        # Scaling q before the product costs one multiplication per q entry, not one per score.
        q = (self.q_proj(y) * (1.0 / math.sqrt(hd))).view(b, t, h, hd).transpose(1, 2)
        k = self.k_proj(y).view(b, t, h, hd).transpose(1, 2)
        v = self.v_proj(y).view(b, t, h, hd).transpose(1, 2)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        y = causal_attention(q, k, v, bias).transpose(1, 2).reshape(b, t, d)
        x = x + self.o_proj(y)
        x = x + self.down_proj(torch.nn.functional.gelu(self.up_proj(self.ln2(x))))
        return x, (k, v)


class TinyCausalLM(nn.Module):
    """A pre-LayerNorm decoder with learned absolute positions."""

    def __init__(self, cfg: TinyModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        # The frozen head must be able to express a peaked distribution (logits
        # of several nats) from the unit-variance final LayerNorm output, or no
        # adapter could ever learn; std 1/sqrt(d) gives unit-variance logits.
        nn.init.normal_(self.lm_head.weight, std=cfg.d_model ** -0.5)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past: Optional[KVCache] = None,
        keep_last: int = 0,
    ):
        """attention_mask covers past + current positions ([B, P+T]); returns (logits, cache).
        keep_last > 0 computes the logits of the last keep_last positions only."""
        t = input_ids.shape[1]
        x = self.embed(input_ids) + self.pos(position_ids.clamp(min=0))
        bias = attention_bias(attention_mask, t, x.dtype)
        new_cache: KVCache = []
        for i, blk in enumerate(self.blocks):
            x, kv = blk(x, bias, past[i] if past is not None else None)
            new_cache.append(kv)
        if keep_last:
            x = x[:, -keep_last:]
        return self.lm_head(self.ln_f(x)), new_cache


class TinyBackend:
    """The model interface the engine uses; see hf.HFBackend for the same interface on transformers."""

    implementation_detail = "tiny"

    def __init__(self, lora: LoRAConfig, model_cfg: Optional[TinyModelConfig] = None, device: str = "cpu", dtype: str = "float32"):
        self.model_cfg = model_cfg or TinyModelConfig()
        self.lora = lora
        unknown = set(lora.target_modules) - set(DEFAULT_TARGETS)
        if unknown:
            raise ValueError(f"--lora-target-modules: tiny backend has no module(s) {sorted(unknown)}; it has {list(DEFAULT_TARGETS)}")
        if lora.rank < 1:
            raise ValueError(f"--lora-rank: must be >= 1, got {lora.rank}")
        self.device = torch.device(device)
        self.tokenizer = ByteTokenizer()
        # Weights are a pure function of the seed, independent of global RNG use.
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(self.model_cfg.seed)
        try:
            self.model = TinyCausalLM(self.model_cfg)
            for p in self.model.parameters():
                p.requires_grad_(False)
            self._lora_layers: List[LoRALinear] = []
            for blk in self.model.blocks:
                for name in lora.target_modules:
                    layer = LoRALinear(getattr(blk, name), lora.rank, lora.alpha, lora.dropout)
                    setattr(blk, name, layer)
                    self._lora_layers.append(layer)
        finally:
            torch.random.set_rng_state(gen_state)
        # The weights are drawn in float32 whatever the dtype, so a float64
        # model is the float32 one widened (the same function of the seed).
        self.model.to(self.device, dtype=getattr(torch, dtype))
        self.model.eval()
        self.base_model = (
            f"tiny-byte-transformer(d={self.model_cfg.d_model},layers={self.model_cfg.n_layers},"
            f"heads={self.model_cfg.n_heads},seed={self.model_cfg.seed})"
        )
        self.max_positions = self.model_cfg.max_positions

    # --- the interface the engine uses ---

    def adapter_info(self) -> Dict:
        return {
            "type": "lora",
            "rank": self.lora.rank,
            "alpha": self.lora.alpha,
            "dropout": self.lora.dropout,
            "target_modules": list(self.lora.target_modules),
        }

    def trainable_parameters(self) -> List[nn.Parameter]:
        return [p for layer in self._lora_layers for p in (layer.lora_A, layer.lora_B)]

    def forward(self, input_ids, attention_mask, position_ids, past=None, use_cache=False, keep_last=0):
        logits, cache = self.model(input_ids, attention_mask, position_ids, past, keep_last)
        return logits, (cache if use_cache else None)

    # The engine computes a prompt shared by several rows (the G samples of a
    # group) once and copies its cache to each row; gradients flow back
    # through the copy. A backend without this method gets a forward per row.
    def expand_cache(self, past: KVCache, index: torch.Tensor) -> KVCache:
        """The cache of row index[r] of past, for each r."""
        return [(k.index_select(0, index), v.index_select(0, index)) for k, v in past]

    @contextlib.contextmanager
    def adapter_disabled(self):
        for layer in self._lora_layers:
            layer.enabled = False
        try:
            yield
        finally:
            for layer in self._lora_layers:
                layer.enabled = True

    def train(self, mode: bool = True):
        self.model.train(mode)

    def adapter_state(self) -> Dict[str, torch.Tensor]:
        return {n: p for n, p in self.model.named_parameters() if "lora_" in n}

    def save_adapter(self, directory: str) -> None:
        torch.save({n: p.detach().cpu() for n, p in self.adapter_state().items()}, os.path.join(directory, "adapter.pt"))
        with open(os.path.join(directory, "adapter_config.json"), "w", encoding="utf-8") as f:
            json.dump({"backend": "tiny", "model": asdict(self.model_cfg), "lora": asdict(self.lora)}, f, indent=2)

    def load_adapter(self, directory: str) -> None:
        with open(os.path.join(directory, "adapter_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        if cfg.get("model") != asdict(self.model_cfg) or cfg.get("lora") != asdict(self.lora):
            raise ValueError(
                f"{directory}: adapter was saved for model {cfg.get('model')} lora {cfg.get('lora')}, "
                f"this server runs model {asdict(self.model_cfg)} lora {asdict(self.lora)}"
            )
        state = torch.load(os.path.join(directory, "adapter.pt"), map_location=self.device)
        params = self.adapter_state()
        if set(state) != set(params):
            raise ValueError(f"{directory}: adapter tensors {sorted(state)} do not match the model's {sorted(params)}")
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(state[n])
