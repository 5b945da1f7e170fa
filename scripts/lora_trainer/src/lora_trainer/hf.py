"""The Hugging Face backend: a transformers causal LM wrapped with a PEFT LoRA adapter.

transformers and peft are imported here only, when this backend is chosen,
so the tiny backend and the tests run without them. bf16 on a GPU, fp32 on
a CPU. The adapter saved by save_adapter is a plain PEFT adapter directory
(adapter_config.json + adapter_model.safetensors), loadable with
`PeftModel.from_pretrained(base, path)` and by `ollama create` (ADAPTER).
"""

import inspect
import logging
from typing import Dict, List, Optional, Sequence

import torch

from .engine import render_plain
from .tiny import LoRAConfig

log = logging.getLogger("lora_trainer")

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


class HFTokenizer:
    """The engine's tokenizer interface over a transformers tokenizer."""

    def __init__(self, tok, model, generation_config):
        self.tok = tok
        eos = set()
        for src in (tok.eos_token_id, getattr(generation_config, "eos_token_id", None)):
            if isinstance(src, int):
                eos.add(src)
            elif isinstance(src, (list, tuple)):
                eos.update(int(x) for x in src)
        if not eos:
            raise ValueError("the tokenizer and generation config define no EOS token")
        self.eos_ids = frozenset(eos)
        # SFT completions end with the tokenizer's EOS (for chat models: the end-of-turn token).
        self.eos_id = tok.eos_token_id if tok.eos_token_id is not None else min(eos)
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.eos_id
        # The embedding may be larger than the tokenizer (padded vocabularies); ids are valid up to it.
        self.vocab_size = model.get_input_embeddings().num_embeddings
        self.has_template = bool(getattr(tok, "chat_template", None))

    def encode(self, text: str) -> List[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def encode_prompt(self, text: str, messages: Optional[List[Dict[str, str]]]) -> List[int]:
        if messages:
            if self.has_template:
                # The template writes the special tokens (BOS, turn markers) itself.
                rendered = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                return list(self.tok(rendered, add_special_tokens=False)["input_ids"])
            text = render_plain(messages)
        return list(self.tok(text, add_special_tokens=True)["input_ids"])


class HFBackend:
    def __init__(
        self,
        base_model: str,
        lora: LoRAConfig,
        device: str,
        dtype: str = "auto",
        init_adapter: str = "",
        gradient_checkpointing: bool = False,
        trust_remote_code: bool = False,
        seed: int = 0,
    ):
        """Load base_model (a hub name or a local path) and add the LoRA adapter."""
        try:
            import peft
            import transformers
        except ImportError as e:
            raise SystemExit(
                f"--backend hf needs transformers and peft ({e}); install them, e.g. `pip install transformers peft accelerate`"
            ) from e
        self.device = torch.device(device)
        if dtype == "auto":
            dtype = "bfloat16" if self.device.type == "cuda" else "float32"
        torch_dtype = getattr(torch, dtype)
        tokenizer = transformers.AutoTokenizer.from_pretrained(base_model, trust_remote_code=trust_remote_code)
        # transformers 4.56 renamed torch_dtype to dtype (5.x drops the old name).
        version = tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())
        dtype_kw = "dtype" if version >= (4, 56) else "torch_dtype"
        model = transformers.AutoModelForCausalLM.from_pretrained(
            base_model, trust_remote_code=trust_remote_code, **{dtype_kw: torch_dtype}
        )
        model.to(device=self.device, dtype=torch_dtype)
        if gradient_checkpointing:
            model.gradient_checkpointing_enable()
            model.enable_input_require_grads()  # checkpointed blocks need an input that requires grad
        self.base_model = base_model
        self.lora = lora
        targets = lora.target_modules or list(DEFAULT_TARGETS)
        lcfg = peft.LoraConfig(
            r=lora.rank,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=targets,
            bias="none",
            task_type="CAUSAL_LM",
        )
        torch.manual_seed(seed)  # the A matrices' random init
        if init_adapter:
            # Start from a saved adapter (e.g. an SFT run); its LoRA settings win.
            self.model = peft.PeftModel.from_pretrained(model, init_adapter, is_trainable=True)
            c = self.model.peft_config["default"]
            tm = c.target_modules  # a list, a set, or one regular expression
            tm = [tm] if isinstance(tm, str) else sorted(tm)
            self.lora = LoRAConfig(rank=c.r, alpha=c.lora_alpha, dropout=c.lora_dropout, target_modules=tm)
        else:
            self.model = peft.get_peft_model(model, lcfg)
            self.lora = LoRAConfig(rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout, target_modules=list(targets))
        self.model.eval()
        self.tokenizer = HFTokenizer(tokenizer, self.model, getattr(model, "generation_config", None))
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        # transformers >= 4.50 calls it logits_to_keep, 4.45-4.49 num_logits_to_keep; older: all logits.
        params = inspect.signature(model.forward).parameters
        self._keep_arg = next((n for n in ("logits_to_keep", "num_logits_to_keep") if n in params), "")
        self._peft = peft
        n_train = sum(p.numel() for p in self.trainable_parameters())
        log.info("loaded %s on %s (%s), LoRA r=%d: %d trainable parameters", base_model, self.device, dtype, self.lora.rank, n_train)

    def adapter_info(self) -> Dict:
        return {
            "type": "lora",
            "rank": self.lora.rank,
            "alpha": self.lora.alpha,
            "dropout": self.lora.dropout,
            "target_modules": list(self.lora.target_modules),
        }

    def trainable_parameters(self) -> List[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def forward(self, input_ids, attention_mask, position_ids, past=None, use_cache=False, keep_last=0):
        kw = {}
        if keep_last and self._keep_arg:
            # Only the last positions' logits: a 150k vocabulary times every
            # prompt position would dominate the memory of a step.
            kw[self._keep_arg] = keep_last
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past,
            use_cache=use_cache,
            **kw,
        )
        return out.logits, (out.past_key_values if use_cache else None)

    def adapter_disabled(self):
        """The reference policy: the same weights with the adapter off (no second copy)."""
        return self.model.disable_adapter()

    def train(self, mode: bool = True):
        self.model.train(mode)

    def save_adapter(self, directory: str) -> None:
        self.model.save_pretrained(directory)

    def load_adapter(self, directory: str) -> None:
        weights = self._peft.utils.load_peft_weights(directory, device=str(self.device))
        expected = {k for k in self.model.state_dict() if "lora_" in k}
        result = self._peft.set_peft_model_state_dict(self.model, weights)
        unexpected = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
        missing = [k for k in getattr(result, "missing_keys", []) if k in expected]
        if unexpected or missing:
            raise ValueError(
                f"{directory}: adapter does not match this model: unexpected {unexpected[:3]}, missing {missing[:3]}"
            )
