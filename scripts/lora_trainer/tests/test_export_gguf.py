"""lora_trainer.export_gguf's pieces that need no Ollama: the pre-tokenizer
llama.cpp is told to split with, and the GGUF it writes read back with the
gguf package's own reader."""

import json
import os

import numpy as np
import pytest

from .conftest import need


def _tokenizer_json(tmp_path, pre, vocab=None) -> str:
    path = str(tmp_path / "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"model": {"type": "BPE", "vocab": vocab or {}, "merges": []}, "pre_tokenizer": pre}, f)
    return path


def test_pre_tokenizer_names(tmp_path):
    from lora_trainer.export_gguf import LLAMA3_SPLIT, ExportError, pre_tokenizer_name

    llama3 = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    assert pre_tokenizer_name(_tokenizer_json(tmp_path, llama3)) == "llama-bpe"
    gpt2 = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    assert pre_tokenizer_name(_tokenizer_json(tmp_path, gpt2, {"12": 0})) == "gpt2"
    # No token of two digits: llama.cpp's smollm splits the same way (and its gpt2 does not).
    assert pre_tokenizer_name(_tokenizer_json(tmp_path, gpt2, {"1": 0, "a1": 1})) == "smollm"
    smollm = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, gpt2]}
    assert pre_tokenizer_name(_tokenizer_json(tmp_path, smollm)) == "smollm"
    path = _tokenizer_json(tmp_path, {"type": "Whitespace"})
    with pytest.raises(ExportError, match="tokenizer.json: pre_tokenizer .*Whitespace"):
        pre_tokenizer_name(path)


def test_written_gguf_reads_back(tmp_path, hf_available):
    import importlib.util

    need(importlib.util.find_spec("gguf") is not None, "the gguf package is not installed (scripts/ci/setup-python.sh)")
    import gguf

    from lora_trainer.export_gguf import load_merged, write_gguf

    from .chatml_model import CHATML, build_model

    base = build_model(str(tmp_path / "m"), arch="qwen2")
    model, tok = load_merged(base, None)
    out = str(tmp_path / "m.gguf")
    summary = write_gguf(model, tok, base, out, "f16")
    r = gguf.GGUFReader(out)
    assert r.fields["general.architecture"].contents() == "qwen2"
    assert r.fields["tokenizer.ggml.pre"].contents() == "llama-bpe"
    assert r.fields["tokenizer.chat_template"].contents() == CHATML
    assert r.fields["tokenizer.ggml.eos_token_id"].contents() == tok.convert_tokens_to_ids("<|im_end|>")
    tensors = {t.name: t for t in r.tensors}
    assert len(tensors) == summary["tensors"]
    # 2-D weights F16, norms and biases F32; qwen2's q rows are not permuted.
    q = tensors["blk.0.attn_q.weight"]
    assert q.tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["blk.0.attn_q.bias"].tensor_type == gguf.GGMLQuantizationType.F32
    want = model.model.layers[0].self_attn.q_proj.weight.detach().numpy().astype(np.float16)
    assert np.array_equal(np.asarray(q.data).reshape(want.shape), want)
    assert os.path.getsize(out) == summary["bytes"]
