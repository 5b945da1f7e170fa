"""Embedding rate of all-MiniLM-L6-v2: Ollama's /api/embed against
sentence-transformers' computation (transformers' encoder, mean pooling, L2
normalization: what scripts/st_reference.py computes), same texts, same
threads, repetitions interleaved (A B, B A, A B, ...), median per side.

Usage:
  python scripts/embed_bench.py --model-dir DIR --ollama URL [--model all-minilm-l6-v2]
      [--kb ../shared/data/kb/passages.jsonl] [--n 64] [--batch 32] [--threads 1]
      [--reps 5] [--keep-alive 30m]

The texts are the knowledge base's first n passages ("title text"), each cut
to sentence-transformers' max_seq_length with the model's own tokenizer and
decoded, so both sides embed the same words and neither truncates further.
Prints one JSON line per repetition and a summary line: texts/s per side
(median and range) and the ratio Ollama / PyTorch. The sentence-transformers
package is not needed (not in the project's lock); its encode() is this
computation with batches of --batch (texts sorted by length first, as
encode() sorts them).
"""

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--ollama", required=True)
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--kb", default="../shared/data/kb/passages.jsonl")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--keep-alive", default="30m")
    a = ap.parse_args()

    import torch  # noqa: PLC0415 - after the offline switches
    from transformers import AutoModel, AutoTokenizer  # noqa: PLC0415

    torch.set_num_threads(a.threads)
    with open(os.path.join(a.model_dir, "sentence_bert_config.json")) as f:
        max_len = json.load(f)["max_seq_length"]
    tok = AutoTokenizer.from_pretrained(a.model_dir)
    model = AutoModel.from_pretrained(a.model_dir, dtype=torch.float32).eval()
    texts = []
    with open(a.kb) as f:
        for line in f:
            p = json.loads(line)
            ids = tok(((p.get("title") or "") + " " + p["text"]).strip(), truncation=True,
                      max_length=max_len - 6)["input_ids"]
            texts.append(tok.decode(ids, skip_special_tokens=True))
            if len(texts) == a.n:
                break

    def torch_side():
        # as SentenceTransformer.encode does: longest texts first, so a
        # batch pads little
        ordered = sorted(texts, key=len, reverse=True)
        with torch.no_grad():
            for s in range(0, len(ordered), a.batch):
                b = tok(ordered[s:s + a.batch], padding=True, truncation=True, max_length=max_len, return_tensors="pt")
                h = model(**b).last_hidden_state
                m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
                torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2, dim=1)

    def ollama_side():
        for s in range(0, len(texts), a.batch):
            body = json.dumps({"model": a.model, "input": texts[s:s + a.batch], "keep_alive": a.keep_alive,
                               "options": {"num_thread": a.threads}}).encode()
            req = urllib.request.Request(a.ollama.rstrip("/") + "/api/embed", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=3600) as r:
                out = json.load(r)
            if len(out["embeddings"]) != len(texts[s:s + a.batch]):
                raise SystemExit("ollama returned %d vectors" % len(out["embeddings"]))

    sides = {"ollama": ollama_side, "pytorch": torch_side}
    # warm-up: the model loaded on both sides (not timed)
    texts_all, texts = texts, texts[:2]
    for f in sides.values():
        f()
    texts = texts_all
    rates = {k: [] for k in sides}
    for rep in range(a.reps):
        order = ["ollama", "pytorch"] if rep % 2 == 0 else ["pytorch", "ollama"]
        for k in order:
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            sides[k]()
            dt = time.perf_counter() - t0
            rates[k].append(len(texts) / dt)
            print(json.dumps({"rep": rep, "side": k, "seconds": round(dt, 3), "texts_per_s": round(len(texts) / dt, 2),
                              "load1": load}), flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(json.dumps({"n": len(texts), "batch": a.batch, "threads": a.threads, "reps": a.reps,
                      "median_texts_per_s": {k: round(v, 2) for k, v in med.items()},
                      "range": {k: [round(min(v), 2), round(max(v), 2)] for k, v in rates.items()},
                      "ratio_ollama_over_pytorch": round(med["ollama"] / med["pytorch"], 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
