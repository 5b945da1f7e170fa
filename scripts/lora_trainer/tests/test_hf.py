"""The hf backend's pieces that run without transformers: lazy imports and the tokenizer adapter."""

import os
import subprocess
import sys

import pytest

from lora_trainer import hf
from lora_trainer.tiny import LoRAConfig


def test_importing_the_backend_does_not_import_transformers():
    # The tiny backend and CI must work where transformers and peft are absent:
    # they are imported when an HFBackend is built, not before.
    code = "import sys, lora_trainer.cli, lora_trainer.hf; print(sorted(m for m in ('transformers', 'peft') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_transformers_is_a_clear_error(monkeypatch):
    # As on a machine without them: a None entry in sys.modules makes the import fail.
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(SystemExit, match="needs transformers and peft"):
        hf.HFBackend("some/model", LoRAConfig(), device="cpu")


class FakeTok:
    """The slice of a transformers tokenizer that HFTokenizer uses."""

    eos_token_id = 2
    pad_token_id = None

    def __init__(self, template):
        self.chat_template = template

    def __call__(self, text, add_special_tokens):
        ids = [ord(c) for c in text]
        return {"input_ids": ([1] if add_special_tokens else []) + ids}

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def decode(self, ids, skip_special_tokens):
        return "".join(chr(i) for i in ids if i > 2)


class FakeEmbedding:
    num_embeddings = 300


class FakeModel:
    def get_input_embeddings(self):
        return FakeEmbedding()


class GenCfg:
    eos_token_id = [2, 7]  # chat models stop at end-of-turn or end-of-text


def test_tokenizer_adapter():
    t = hf.HFTokenizer(FakeTok("{{ messages }}"), FakeModel(), GenCfg())
    assert t.eos_ids == {2, 7} and t.eos_id == 2 and t.pad_id == 2 and t.vocab_size == 300
    # Text prompts get the tokenizer's special tokens; chat prompts the template's.
    assert t.encode_prompt("hi", None) == [1, ord("h"), ord("i")]
    msgs = [{"role": "user", "content": "q"}]
    assert t.encode_prompt("", msgs) == [ord(c) for c in "<user>q<assistant>"]
    assert t.encode("ab") == [ord("a"), ord("b")]
    # Without a chat template, messages are rendered as plain "role: content" lines.
    plain = hf.HFTokenizer(FakeTok(None), FakeModel(), None)
    assert plain.encode_prompt("", msgs) == [1] + [ord(c) for c in "user: q\nassistant: "]
    assert plain.eos_ids == {2}
