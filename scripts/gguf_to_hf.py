#!/usr/bin/env python3
"""Turn a GGUF model file into a Hugging Face model directory that the LoRA
trainer's hf backend loads as its base (--base-model DIR).

transformers reads the file itself (from_pretrained(..., gguf_file=FILE)),
with every weight dequantized to float32; the weights are then saved as
model.safetensors with the config, generation config and tokenizer (chat
template included) that transformers derived from the file's metadata. So
the trainer's base is exactly the GGUF's numbers, and an adapter trained on it
fits the GGUF file that Ollama serves (FROM FILE, ADAPTER the PEFT dir).

Before writing, the directory is loaded back and its logits on a chat prompt
are compared with the GGUF-loaded model's: they must be equal (max |diff| is
printed). Needs the `gguf` package (scripts/ci/setup-smollm2.sh installs it
next to the SmolLM2 file; put that directory on PYTHONPATH).

  python scripts/gguf_to_hf.py FILE.gguf OUT_DIR
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def fail(msg: str) -> "None":
    print(f"gguf_to_hf: {msg}", file=sys.stderr)
    sys.exit(1)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf", help="the .gguf model file")
    ap.add_argument("out", help="directory to write (must not exist, or be empty)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    a = ap.parse_args(argv)
    if not os.path.isfile(a.gguf):
        fail(f"{a.gguf}: no such file")
    with open(a.gguf, "rb") as f:
        if f.read(4) != b"GGUF":
            fail(f"{a.gguf}: not a GGUF file (no GGUF magic)")
    if os.path.exists(a.out) and (not os.path.isdir(a.out) or os.listdir(a.out)):
        fail(f"{a.out}: exists and is not an empty directory")
    try:
        import gguf  # noqa: F401 - transformers needs it to read the file
    except ImportError:
        fail("the gguf package is missing (scripts/ci/setup-smollm2.sh installs it; add its directory to PYTHONPATH)")
    import torch
    import transformers

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    directory, name = os.path.split(os.path.abspath(a.gguf))
    t0 = time.time()
    qc = transformers.GgufConfig(dequantize=True)
    tok = transformers.AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, gguf_file=name, dtype=torch.float32, quantization_config=qc)
    model.eval()
    load_s = time.time() - t0
    if not getattr(tok, "chat_template", None):
        fail(f"{a.gguf}: the file carries no chat template (tokenizer.chat_template)")
    for n, p in model.named_parameters():
        if p.dtype != torch.float32:
            fail(f"{a.gguf}: {n} loaded as {p.dtype}, not dequantized to float32")

    # The weights are plain float32 tensors now; what marks the model as
    # GGUF-quantized is only the quantizer object and the config entry.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "quantization_method"):
        if hasattr(model, attr):
            try:
                delattr(model, attr)
            except AttributeError:
                pass

    tmp = tempfile.mkdtemp(prefix=".gguf_to_hf-", dir=os.path.dirname(os.path.abspath(a.out)) or ".")
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        with open(os.path.join(tmp, "config.json"), encoding="utf-8") as f:
            if "quantization_config" in json.load(f):
                fail("the saved config still names a quantization")
        # The check: the saved directory computes what the GGUF computes.
        msgs = [{"role": "system", "content": "You rewrite questions."},
                {"role": "user", "content": "Question: and what about its capital?\nRewrite:"}]
        ids = tok(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                  add_special_tokens=False, return_tensors="pt").input_ids
        back = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
        back.eval()
        with torch.no_grad():
            diff = (model(ids).logits - back(ids).logits).abs().max().item()
        if diff != 0.0:
            fail(f"the saved directory's logits differ from the GGUF's by {diff:g}")
        if os.path.isdir(a.out):
            os.rmdir(a.out)
        os.replace(tmp, a.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"gguf": os.path.abspath(a.gguf), "out": os.path.abspath(a.out), "architecture": model.config.model_type,
                      "parameters": params, "load_s": round(load_s, 1), "prompt_tokens": ids.shape[1],
                      "max_abs_logit_diff": diff}))


if __name__ == "__main__":
    main()
