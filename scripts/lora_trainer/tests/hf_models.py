"""Tiny Hugging Face models built here, for the hf backend's tests: random
weights from a LlamaConfig or Qwen2Config and a byte-level BPE tokenizer
trained on a few sentences, saved with save_pretrained as a model directory
that the backend loads back with from_pretrained (the real loading code).
Nothing is downloaded."""

import os
from typing import List

import torch

# A chat template in the shape of the real ones: role markers, the end-of-turn
# token after each message, the assistant marker for the generation prompt.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

SENTENCES = [
    "what caused the bronze age collapse?",
    "the sea peoples raided the coast of the eastern mediterranean.",
    "how did the hittite empire end?",
    "drought and famine weakened the palace economies.",
    "which cities were destroyed around 1200 bc?",
    "ugarit, mycenae and hattusa were burned.",
    "rewrite the question so that it stands alone.",
    "user: what about egypt? assistant: egypt survived but lost its empire in the levant.",
    "the answer is in the retrieved passages about trade networks and tin.",
    "memory of earlier turns helps the rewriter resolve pronouns like it and they.",
]


def tokenizer_class():
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:  # transformers 5 names the tokenizers-backed class differently
        from transformers import TokenizersBackend as PreTrainedTokenizerFast
    return PreTrainedTokenizerFast


def build_tokenizer(vocab_size: int = 400, chat_template: bool = True):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES, trainer)
    hf_tok = tokenizer_class()(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    if chat_template:
        hf_tok.chat_template = CHAT_TEMPLATE
    return hf_tok


def build_model(directory: str, arch: str = "llama", seed: int = 0, hidden: int = 32, layers: int = 2,
                chat_template: bool = True) -> str:
    """A random-weight `arch` ("llama" or "qwen2") model and its tokenizer, saved to directory."""
    import transformers

    tok = build_tokenizer(chat_template=chat_template)
    common = dict(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    if arch == "llama":
        cfg, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    elif arch == "qwen2":
        cfg, cls = transformers.Qwen2Config(**common), transformers.Qwen2ForCausalLM
    else:
        raise ValueError(f"unknown arch {arch!r}")
    torch.manual_seed(seed)
    model = cls(cfg)
    # Random init at the default scale gives near-uniform next-token
    # distributions; larger weights make the model prefer some tokens, so
    # samples and logprobs vary and updates have something to move.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(8.0)
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def files(directory: str) -> List[str]:
    return sorted(os.listdir(directory))
