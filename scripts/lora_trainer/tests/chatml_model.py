"""A tiny random-weight Llama that Ollama converts faithfully, for the test
that serves a trained adapter with Ollama (test_ollama_serving.py).

What Ollama v0.6.5's `ollama create` reads from a model directory decides
what this builder does differently from hf_models.build_model:
- the pre-tokenizer is Llama 3's (its Split regex, then byte-level), because
  Ollama names a BPE pre-tokenizer by the sha256 of its Split regexes and
  llama.cpp then splits text with the same regex; an unrecognized one falls
  back to llama.cpp's "default" splitting, which differs from the Hugging
  Face tokenizer's, so the two would feed the model different token ids;
- the chat template is ChatML and is written into tokenizer_config.json
  (Ollama reads it only there, not from chat_template.jinja), so that Ollama
  detects its own ChatML template, which renders messages to the same text;
- the weights are rounded to float16 values (stored as float32): Ollama
  converts safetensors to F16, and this way the conversion loses nothing;
- the output rows of the tokens that are not whole UTF-8 text on their own
  (single bytes of a multi-byte character) and of the special tokens other
  than the end of turn are zero: their logit is always 0 while the greedy
  choice's is far above it, so greedy text is valid UTF-8 without NUL (which
  Ollama drops too) and ends only at
  <|im_end|>. Ollama drops invalid UTF-8 from what it returns, and stops at
  <|im_start|> as well; a random model that emitted such tokens would make
  the two sides' texts differ though their tokens agree.
Nothing is downloaded."""

import json
import os

import torch

from .hf_models import SENTENCES, tokenizer_class

# Llama 3's pre-tokenizer regex; sha256 d98f9631…, which Ollama maps to llama.cpp's "llama-bpe".
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# The ChatML template as Qwen2 and SmolLM2 write it, without a default system message.
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

EXTRA = [
    "You rewrite the last question of a conversation into a self-contained search query.",
    "Rewrite the question so that it can be understood without the conversation.",
    "Conversation: User: Assistant: Question: Rewrite:",
]


def build_tokenizer(vocab_size: int = 512):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES + EXTRA, trainer)
    hf = tokenizer_class()(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf.chat_template = CHATML
    return hf


def byte_level_bytes(token: str) -> bytes:
    """The bytes a byte-level BPE token stands for (GPT-2's byte-to-character map, inverted)."""
    from tokenizers import pre_tokenizers

    chars = pre_tokenizers.ByteLevel.alphabet()
    # GPT-2's map: printable bytes map to themselves, the rest to 256 + n in byte order.
    table, n = {}, 0
    for b in range(256):
        if (33 <= b <= 126) or (161 <= b <= 172) or (174 <= b <= 255):
            table[chr(b)] = b
        else:
            table[chr(256 + n)] = b
            n += 1
    assert set(table) == set(chars), "GPT-2 byte map differs from the tokenizers library's alphabet"
    return bytes(table[c] for c in token)


def silent_ids(tok) -> list:
    """Token ids greedy decoding must never pick: special tokens but the end of
    turn, and tokens whose bytes are not valid UTF-8 by themselves."""
    specials = set(tok.all_special_ids) | {tok.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|endoftext|>")}
    out = []
    for i in range(len(tok)):
        if i == tok.eos_token_id:
            continue
        if i in specials:
            out.append(i)
            continue
        try:
            text = byte_level_bytes(tok.convert_ids_to_tokens(i)).decode("utf-8")
        except UnicodeDecodeError:
            out.append(i)
            continue
        if "\x00" in text:  # Ollama drops NUL from what it returns
            out.append(i)
    return out


def build_model(directory: str, seed: int = 0, hidden: int = 64, layers: int = 2, arch: str = "llama") -> str:
    """Save the model ("llama" or "qwen2") and tokenizer to directory (returned)."""
    import transformers

    tok = build_tokenizer()
    classes = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
               "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}
    config_cls, model_cls = classes[arch]
    cfg = config_cls(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = model_cls(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.5)  # qwen2's q/k/v biases start at zero; random ones make the export carry them
            if p.dim() == 2:
                p.mul_(8.0)  # peaked next-token distributions, so greedy choices are not near-ties
            p.copy_(p.to(torch.float16).to(torch.float32))
        model.lm_head.weight[silent_ids(tok)] = 0.0
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    # Ollama reads the chat template from tokenizer_config.json only.
    path = os.path.join(directory, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        tc = json.load(f)
    tc["chat_template"] = CHATML
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tc, f, indent=2)
    jinja = os.path.join(directory, "chat_template.jinja")
    if os.path.exists(jinja):
        os.remove(jinja)
    return directory


if __name__ == "__main__":
    # python -m tests.chatml_model DIR   (from scripts/lora_trainer): the walkthrough's tiny model.
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.chatml_model DIR")
    print(build_model(sys.argv[1]))
