"""Sentence-transformers' embedding of texts, computed with transformers alone.

The reference for the Ollama embedder's parity test (embedding/
minilm_integration_test.go): what SentenceTransformer(dir).encode(texts,
normalize_embeddings=True) returns for a BERT model with mean pooling
(all-MiniLM-L6-v2: modules Transformer -> Pooling(mean) -> Normalize), without
the sentence-transformers package (not in the project's lock): its Transformer
module tokenizes with the model's tokenizer, truncating to max_seq_length
(sentence_bert_config.json), runs the encoder, and Pooling averages the token
embeddings where attention_mask is 1; Normalize divides by the L2 norm.

Usage: python scripts/st_reference.py MODEL_DIR < texts.json > out.json
  texts.json: a JSON list of strings
  out.json:   {"embeddings": [[float]...], "tokens": [int...]}  (tokens: the
              number of tokens of each text after truncation, [CLS]/[SEP] included)
Runs offline (HF_HUB_OFFLINE=1), float32, on the CPU, in one thread.
"""

import json
import os
import sys


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch  # noqa: PLC0415 - after the offline switches
    from transformers import AutoModel, AutoTokenizer  # noqa: PLC0415

    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    model_dir = sys.argv[1]
    with open(os.path.join(model_dir, "sentence_bert_config.json")) as f:
        max_len = json.load(f)["max_seq_length"]
    texts = json.load(sys.stdin)
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        print("st_reference.py: stdin must be a JSON list of strings", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    out, lengths = [], []
    with torch.no_grad():
        for start in range(0, len(texts), 16):
            batch = tok(texts[start:start + 16], padding=True, truncation=True,
                        max_length=max_len, return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            out.extend(pooled.tolist())
            lengths.extend(int(n) for n in batch["attention_mask"].sum(1))
    json.dump({"embeddings": out, "tokens": lengths}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
