"""The Hugging Face backend: a transformers causal LM wrapped with a PEFT LoRA adapter.

transformers and peft are imported here only, when this backend is chosen,
so the tiny backend and the tests run without them. bf16 on a GPU, fp32 on
a CPU. The adapter saved by save_adapter is a plain PEFT adapter directory
(adapter_config.json + adapter_model.safetensors), loadable with
`PeftModel.from_pretrained(base, path)` and by `ollama create` (ADAPTER).
"""

import inspect
import json
import logging
import os
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .engine import StartupError, render_plain
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


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def first_line(err: BaseException) -> str:
    """An exception as one line: transformers' and peft's messages run to paragraphs."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def check_model_dir(path: str) -> None:
    """A local model directory must hold a config, weights (every shard its index
    lists) and a tokenizer; a name that is not a directory is left to the hub cache."""
    if not os.path.isdir(path):
        if os.path.exists(path) or path.startswith((".", os.sep, "~")):
            raise StartupError(f"--base-model {path}: not a model directory")
        return
    missing = []
    if not os.path.isfile(os.path.join(path, "config.json")):
        missing.append("config.json")
    weights = [f for f in WEIGHT_FILES if os.path.isfile(os.path.join(path, f))]
    if not weights:
        missing.append(" or ".join(WEIGHT_FILES[::2]))
    for index in (f for f in weights if f.endswith(".index.json")):
        try:
            with open(os.path.join(path, index), encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise StartupError(f"{os.path.join(path, index)}: not a weight index: {first_line(e)}") from None
        missing += [s for s in shards if not os.path.isfile(os.path.join(path, s))]
    if not any(os.path.isfile(os.path.join(path, f)) for f in TOKENIZER_FILES):
        missing.append(" or ".join(TOKENIZER_FILES[:2]))
    if missing:
        raise StartupError(f"--base-model {path}: not a complete model directory, missing {', '.join(missing)}")


def check_adapter_dir(path: str) -> None:
    if not os.path.isdir(path):
        raise StartupError(f"--init-adapter {path}: not a directory")
    missing = [] if os.path.isfile(os.path.join(path, "adapter_config.json")) else ["adapter_config.json"]
    if not any(os.path.isfile(os.path.join(path, f)) for f in ADAPTER_WEIGHTS):
        missing.append(" or ".join(ADAPTER_WEIGHTS))
    if missing:
        raise StartupError(f"--init-adapter {path}: not a PEFT adapter directory, missing {', '.join(missing)}")


def same_model(a: str, b: str) -> bool:
    """Two names of a base model are the same one: equal, or paths to one directory."""
    if a == b:
        return True
    return os.path.isdir(a) and os.path.isdir(b) and os.path.samefile(a, b)


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
        plain_chat: bool = False,
    ):
        """Load base_model (a hub name or a local path) and add the LoRA adapter.

        Refused with a StartupError naming the path: a model directory missing
        files or failing to load, a tokenizer without a chat template (unless
        plain_chat: then messages are rendered as "role: content" lines), an
        adapter directory that is not one or does not fit the model."""
        try:
            import peft
            import transformers
        except ImportError as e:
            raise SystemExit(
                f"--backend hf needs transformers and peft ({e}); run scripts/ci/setup-python.sh, "
                "or `pip install transformers peft accelerate`"
            ) from e
        self.device = torch.device(device)
        if dtype == "auto":
            dtype = "bfloat16" if self.device.type == "cuda" else "float32"
        torch_dtype = getattr(torch, dtype)
        check_model_dir(base_model)
        if init_adapter:
            check_adapter_dir(init_adapter)
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(base_model, trust_remote_code=trust_remote_code)
        except Exception as e:  # noqa: BLE001 - any loading failure is the directory's
            raise StartupError(f"--base-model {base_model}: cannot load the tokenizer: {first_line(e)}") from None
        if not getattr(tokenizer, "chat_template", None) and not plain_chat:
            raise StartupError(
                f"--base-model {base_model}: the tokenizer has no chat template (no chat_template in tokenizer_config.json, "
                "no chat_template.jinja), so chat prompts cannot be rendered as the model expects; use a chat model, "
                "or pass --plain-chat to render messages as 'role: content' lines"
            )
        # transformers 4.56 renamed torch_dtype to dtype (5.x drops the old name).
        version = tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())
        dtype_kw = "dtype" if version >= (4, 56) else "torch_dtype"
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                base_model, trust_remote_code=trust_remote_code, **{dtype_kw: torch_dtype}
            )
        except Exception as e:  # noqa: BLE001
            raise StartupError(f"--base-model {base_model}: cannot load the model: {first_line(e)}") from None
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
            try:
                self.model = peft.PeftModel.from_pretrained(model, init_adapter, is_trainable=True)
            except Exception as e:  # noqa: BLE001 - shape mismatches, unknown target modules, ...
                raise StartupError(f"--init-adapter {init_adapter}: does not fit --base-model {base_model}: {first_line(e)}") from None
            self._check_adapter_fits(peft, init_adapter, base_model)
            c = self.model.peft_config["default"]
            tm = c.target_modules  # a list, a set, or one regular expression
            tm = [tm] if isinstance(tm, str) else sorted(tm)
            self.lora = LoRAConfig(rank=c.r, alpha=c.lora_alpha, dropout=c.lora_dropout, target_modules=tm)
        else:
            try:
                self.model = peft.get_peft_model(model, lcfg)
            except ValueError as e:  # e.g. a target module the model does not have
                raise StartupError(f"--lora-target-modules {','.join(targets)}: {first_line(e)} (model {base_model})") from None
            # Sorted, as PEFT's saved config gives them back to --init-adapter (a set).
            self.lora = LoRAConfig(rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout, target_modules=sorted(targets))
        self.model.eval()
        self.tokenizer = HFTokenizer(tokenizer, self.model, getattr(model, "generation_config", None))
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        # transformers >= 4.50 calls it logits_to_keep, 4.45-4.49 num_logits_to_keep; older: all logits.
        params = inspect.signature(model.forward).parameters
        self._keep_arg = next((n for n in ("logits_to_keep", "num_logits_to_keep") if n in params), "")
        # transformers 5.x calls the KV cache `cache` (past_key_values is deprecated, gone in 5.40).
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self._peft = peft
        n_train = sum(p.numel() for p in self.trainable_parameters())
        log.info("loaded %s on %s (%s), LoRA r=%d: %d trainable parameters", base_model, self.device, dtype, self.lora.rank, n_train)

    def _check_adapter_fits(self, peft, directory: str, base_model: str) -> None:
        """PeftModel.from_pretrained loads an adapter of another model silently when
        its module names and shapes happen to fit; refuse one whose saved tensors
        do not all land, or whose adapter_config.json names another base model."""
        saved = peft.utils.load_peft_weights(directory, device="cpu")
        # The model's keys carry the adapter name (lora_A.default.weight), the saved ones do not.
        have = {k.replace(".default.", ".") for k in self.model.state_dict() if "lora_" in k}
        lost = sorted(k for k in saved if k not in have)
        if lost:
            raise StartupError(f"--init-adapter {directory}: does not fit --base-model {base_model}: "
                               f"no place for {len(lost)} of its tensors, e.g. {lost[0]}")
        trained_on = getattr(self.model.peft_config["default"], "base_model_name_or_path", None) or ""
        if trained_on and not same_model(trained_on, base_model):
            raise StartupError(
                f"--init-adapter {directory}: trained on base model {trained_on}, not {base_model} "
                f"(base_model_name_or_path in {os.path.join(directory, 'adapter_config.json')}; if it is the same "
                "model under another name or path, change it there)"
            )

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
        kw[self._cache_arg] = past
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=use_cache, **kw)
        return out.logits, (getattr(out, self._cache_arg) if use_cache else None)

    def merged_weights(self) -> List[Tuple[str, torch.Tensor]]:
        """The adapted layers' weights with the LoRA adapter merged, under the
        base model's names (what a vLLM generator loads; vllm_sampler.py)."""
        from .vllm_sampler import merged_lora_weights

        return merged_lora_weights(self.model)

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
