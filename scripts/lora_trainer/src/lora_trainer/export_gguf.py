"""A trained rewriter as one GGUF file, for Ollama (`himes export ollama`).

The LoRA adapter is merged into the base weights in float32 (PEFT's
merge_and_unload: W + scale * B @ A, the same arithmetic as the trainer's
forward pass up to float rounding) and the merged model is written with the
`gguf` package (llama.cpp's own writer) at F32 or F16, with the tokenizer
(byte-level BPE: tokens, types, merges, the pre-tokenizer llama.cpp splits
text with) and the chat template, so that Ollama renders the same prompt and
runs the same weights the trainer ran. Nothing is converted by Ollama: its
`ollama create` copies the file.

Supported bases: the llama and qwen2 architectures (SmolLM2 is llama) with a
byte-level BPE tokenizer whose pre-tokenizer is one llama.cpp knows
(PRE_TOKENIZERS below; another is refused, naming it, rather than split
differently).

Subcommands (python -m lora_trainer.export_gguf ...):
  write   --base DIR [--adapter DIR] --out FILE [--dtype f32|f16]
  greedy  --base DIR [--adapter DIR] --prompts FILE [--max-tokens N]
          FILE: JSONL of {"messages": [...]}; prints one JSON line per prompt:
          {"text", "tokens", "prompt_ids", "max_tokens", "margins" (top-1 minus top-2 logit
          at each step), "first_logits_top": [[id, logit], ...]}
          (and "first_logits", all of them, with --full-logits)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

# llama.cpp's pre-tokenizer names, by the regexes of a tokenizer.json's
# pre_tokenizer (the Split patterns, in order, and whether the ByteLevel step
# splits with GPT-2's own regex). convert_hf_to_gguf.py names them by hashing
# the tokenization of a test text; the regexes are what that hash stands for.
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZERS: Dict[Tuple[Tuple[str, ...], bool], str] = {
    ((LLAMA3_SPLIT,), False): "llama-bpe",
    ((QWEN2_SPLIT,), False): "qwen2",
    (("<digits>",), True): "smollm",  # Digits(individual_digits) then GPT-2's ByteLevel regex
    ((), True): "gpt2",
}

TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5


class ExportError(Exception):
    """A base or adapter this exporter cannot write faithfully; the message names the file and field."""


def _pre_tokenizer_key(pre: Optional[dict]) -> Tuple[Tuple[str, ...], bool]:
    if pre is None:
        return ((), False)
    steps = pre["pretokenizers"] if pre.get("type") == "Sequence" else [pre]
    splits: List[str] = []
    bytelevel_regex = False
    for s in steps:
        t = s.get("type")
        if t == "Split":
            pat = s.get("pattern", {})
            splits.append(pat.get("Regex") or pat.get("String") or "")
        elif t == "Digits" and s.get("individual_digits"):
            splits.append("<digits>")
        elif t == "ByteLevel":
            bytelevel_regex = bool(s.get("use_regex", True))
        else:
            splits.append(f"<{t}>")
    return (tuple(splits), bytelevel_regex)


def pre_tokenizer_name(tokenizer_json: str) -> str:
    """llama.cpp's name of the tokenizer's pre-tokenizer, or ExportError naming what it is."""
    with open(tokenizer_json, encoding="utf-8") as f:
        tj = json.load(f)
    model = tj.get("model", {})
    if model.get("type") != "BPE":
        raise ExportError(f"{tokenizer_json}: model.type is {model.get('type')!r}; only byte-level BPE is exported")
    key = _pre_tokenizer_key(tj.get("pre_tokenizer"))
    name = PRE_TOKENIZERS.get(key)
    if name == "gpt2" and not any(sum(c.isdigit() for c in t) > 1 for t in model.get("vocab", {})):
        # GPT-2's regex alone, and no token of two digits or more (SmolLM2's
        # vocabulary): llama.cpp's "smollm" (digits one by one, then GPT-2's
        # regex) splits into the same tokens, and Ollama's llama.cpp "gpt2"
        # does not: measured on SmolLM2, it splits "'s" into "'" "s" where the
        # Hugging Face tokenizer keeps one token (12 of 12 prompts differed;
        # with "smollm", 12 of 12 equal).
        name = "smollm"
    if name is None:
        raise ExportError(f"{tokenizer_json}: pre_tokenizer {json.dumps(tj.get('pre_tokenizer'))[:300]} is not one "
                          f"llama.cpp knows by name here ({sorted(set(PRE_TOKENIZERS.values()))})")
    return name


def _merges(tokenizer_json: str) -> List[str]:
    with open(tokenizer_json, encoding="utf-8") as f:
        merges = json.load(f)["model"].get("merges", [])
    return [m if isinstance(m, str) else " ".join(m) for m in merges]


def load_merged(base: str, adapter: Optional[str], threads: int = 0):
    """The base model in float32 with the adapter (a PEFT dir or a lora_trainer checkpoint) merged, and its tokenizer."""
    import torch
    import transformers

    if threads > 0:
        torch.set_num_threads(threads)
    tok = transformers.AutoTokenizer.from_pretrained(base)
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    if adapter:
        from peft import PeftModel

        if os.path.isfile(os.path.join(adapter, "adapter", "adapter_config.json")):
            adapter = os.path.join(adapter, "adapter")
        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    model.eval()
    return model, tok


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's row order of a llama q/k projection (convert_hf_to_gguf.py's LlamaModel.permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, tok, base: str, out: str, dtype: str = "f32", name: str = "himes-rewriter") -> Dict[str, Any]:
    """Write model (merged, float32) and tok as one GGUF file at out; returns a summary."""
    import gguf

    if dtype not in ("f32", "f16"):
        raise ExportError(f"dtype {dtype!r}: want f32 or f16")
    cfg = model.config
    arch = cfg.model_type
    archs = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2}
    if arch not in archs:
        raise ExportError(f"{base}/config.json: model_type {arch!r}; the exporter writes llama and qwen2")
    rope_scaling = getattr(cfg, "rope_scaling", None)
    if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) not in (None, "default"):
        raise ExportError(f"{base}/config.json: rope_scaling {rope_scaling} is not exported")
    tj = os.path.join(base, "tokenizer.json")
    if not os.path.isfile(tj):
        raise ExportError(f"{base}: no tokenizer.json (a fast byte-level BPE tokenizer is needed)")
    pre = pre_tokenizer_name(tj)
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head
    rope_theta = getattr(cfg, "rope_theta", None)
    if rope_theta is None:
        rope_theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)

    w = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[archs[arch]])
    w.add_name(name)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(rope_theta))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)

    # Tokenizer: every id up to the model's vocabulary size.
    vocab = tok.get_vocab()
    n_vocab = max(cfg.vocab_size, max(vocab.values()) + 1)
    by_id = {i: t for t, i in vocab.items()}
    added = getattr(tok, "added_tokens_decoder", {}) or {}
    tokens: List[str] = []
    types: List[int] = []
    for i in range(n_vocab):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(TOKEN_UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            types.append(TOKEN_CONTROL if added[i].special else TOKEN_USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(TOKEN_NORMAL)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(_merges(tj))
    for setter, tid in ((w.add_bos_token_id, tok.bos_token_id), (w.add_eos_token_id, tok.eos_token_id),
                        (w.add_pad_token_id, tok.pad_token_id), (w.add_unk_token_id, tok.unk_token_id)):
        if tid is not None:
            setter(int(tid))
    w.add_add_bos_token(bool(getattr(tok, "add_bos_token", False)))
    template = getattr(tok, "chat_template", None)
    if not template:
        raise ExportError(f"{base}: the tokenizer has no chat template (tokenizer_config.json or chat_template.jinja)")
    w.add_chat_template(template)

    tmap = gguf.get_tensor_name_map(archs[arch], cfg.num_hidden_layers)
    sd = model.state_dict()
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    written = 0
    for hf_name, t in sd.items():
        if tied and hf_name == "lm_head.weight":
            continue  # llama.cpp uses token_embd for the output when there is no output.weight
        if hf_name.endswith("rotary_emb.inv_freq"):
            continue
        gname = tmap.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gname is None:
            raise ExportError(f"{base}: tensor {hf_name} has no llama.cpp name for {arch}")
        data = t.detach().to("cpu").float().numpy()
        if arch == "llama" and hf_name.endswith("self_attn.q_proj.weight"):
            data = _permute(data, n_head)
        elif arch == "llama" and hf_name.endswith("self_attn.k_proj.weight"):
            data = _permute(data, n_kv)
        if dtype == "f16" and data.ndim == 2:
            data = data.astype(np.float16)
        w.add_tensor(gname, np.ascontiguousarray(data))
        written += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"gguf": out, "architecture": arch, "dtype": dtype, "tensors": written, "vocab": n_vocab,
            "pre_tokenizer": pre, "bytes": os.path.getsize(out)}


def greedy(model, tok, prompts: List[List[Dict[str, str]]], max_tokens: int, top: int = 5,
           full_logits: bool = False) -> List[Dict[str, Any]]:
    """Greedy rewrites of chat prompts, as the hf backend's greedy sampling decodes them
    (the chat template with the generation prompt, stop at the end-of-sequence token),
    with the first token's top logits."""
    import torch

    from .hf import HFTokenizer

    enc = HFTokenizer(tok, model, getattr(model, "generation_config", None))
    out = []
    for messages in prompts:
        ids = enc.encode_prompt("", messages)  # the trainer's own prompt encoding
        x = torch.tensor([ids])
        gen: List[int] = []
        margins: List[float] = []
        first = None
        with torch.no_grad():
            past = None
            step_in = x
            for _ in range(max_tokens):
                o = model(input_ids=step_in, past_key_values=past, use_cache=True)
                past = o.past_key_values
                logits = o.logits[0, -1].float()
                if first is None:
                    first = logits
                top2 = torch.topk(logits, 2).values
                margins.append(float(top2[0] - top2[1]))
                nxt = int(torch.argmax(logits))
                if nxt in enc.eos_ids:
                    break
                gen.append(nxt)
                step_in = torch.tensor([[nxt]])
        vals, idx = torch.topk(first, min(top, first.numel()))
        r: Dict[str, Any] = {"text": enc.decode(gen), "tokens": gen, "prompt_ids": ids, "max_tokens": max_tokens,
                             "margins": margins, "first_logits_top": [[int(i), float(v)] for v, i in zip(vals, idx)]}
        if full_logits:
            r["first_logits"] = [float(v) for v in first]
        out.append(r)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lora_trainer.export_gguf", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("write", "greedy"):
        p = sub.add_parser(name)
        p.add_argument("--base", required=True, help="the trainer's base model directory")
        p.add_argument("--adapter", default="", help="PEFT adapter dir or lora_trainer checkpoint dir (none: the base)")
        p.add_argument("--threads", type=int, default=1, help="torch threads")
        if name == "write":
            p.add_argument("--out", required=True, help="the .gguf file to write")
            p.add_argument("--dtype", default="f32", choices=["f32", "f16"])
            p.add_argument("--name", default="himes-rewriter")
        else:
            p.add_argument("--prompts", required=True, help='JSONL of {"messages": [...]}')
            p.add_argument("--max-tokens", type=int, default=32)
            p.add_argument("--full-logits", action="store_true", help="every first-token logit, not only the top 5")
    a = ap.parse_args(argv)
    try:
        model, tok = load_merged(a.base, a.adapter or None, a.threads)
        if a.cmd == "write":
            tmp = a.out + ".tmp"
            summary = write_gguf(model, tok, a.base, tmp, a.dtype, a.name)
            os.replace(tmp, a.out)
            summary["gguf"] = a.out
            print(json.dumps(summary))
        else:
            prompts = []
            with open(a.prompts, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        prompts.append(json.loads(line)["messages"])
                    except (ValueError, KeyError) as e:
                        raise ExportError(f"{a.prompts}:{n}: messages: {e}") from e
            for r in greedy(model, tok, prompts, a.max_tokens, full_logits=a.full_logits):
                print(json.dumps(r), flush=True)
    except ExportError as e:
        print(f"export_gguf: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
