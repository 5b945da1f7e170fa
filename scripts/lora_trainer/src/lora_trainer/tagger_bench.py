"""Where the tagger's time goes: one SFT epoch and GRPO steps on real turns, per setting.

    python -m lora_trainer.tagger_bench --turns a.jsonl,b.jsonl [--limit 128] [--settings 1x256,2x256,0x256]

A setting is LAYERSxWINDOW: LoRA on the top LAYERS encoder layers (0 = head
only) with a WINDOW-token encoder input. For each it reports, in seconds:
building the prompt views (tokenization, candidates), filling the
frozen-layer cache (the first pass over the turns), one SFT epoch (batches of
32, AdamW on the LoRA adapter and the head, with the cache warm), and one GRPO
step (16 prompts × 8 samples: the sample call and the grpo_step call). The
machine's load average is printed with the table: on a shared machine only
ratios between settings of one run mean anything.
"""

import argparse
import json
import os
import time

import torch

from . import tagger

LOSS = {"type": "grpo", "clip_low": 0.2, "clip_high": 0.28, "kl_coef": 0.0, "mu": 1, "learning_rate": 5e-4,
        "max_grad_norm": 1.0, "max_length": None, "temperature": 1.0, "weight_decay": 0.0}


def load_turns(paths, limit):
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                if not rec.get("question") or not rec.get("rewrite"):
                    continue
                d = {"history": [{"role": m["role"], "content": m["text"]} for m in rec["history"]], "question": rec["question"]}
                out.append(({"dialogue": d}, rec["rewrite"]))
    return out[:limit] if limit else out


def bench(base, turns, layers, window, seed=1):
    cfg = tagger.TaggerConfig(lora_layers=layers, max_seq_tokens=window, seed=seed)
    eng = tagger.TaggerEngine(tagger.TaggerBackend(base, cfg))
    row = {"setting": f"{layers}x{window}", "trainable": sum(p.numel() for p in eng.params)}
    t = time.perf_counter()
    views = [eng.encode_prompt(p, "p") for p, _ in turns]
    examples = [(v, eng.tok.encode(rw)) for v, (_, rw) in zip(views, turns)]
    row["views_s"] = time.perf_counter() - t
    row["tokens_mean"] = sum(len(v.input_ids) for v in views) / len(views)
    t = time.perf_counter()
    with torch.no_grad():
        for v in views:
            if v.n:
                eng.backend.frozen(v)
    row["cache_fill_s"] = time.perf_counter() - t
    t = time.perf_counter()
    losses_ = []
    for s in range(0, len(examples), 32):
        losses_.append(eng.sft_step(examples[s : s + 32], 2e-3, 1, 1.0)["loss"])
    row["sft_epoch_s"] = time.perf_counter() - t
    row["sft_loss_first_last"] = (round(losses_[0], 4), round(losses_[-1], 4))
    batch = views[:16]
    t = time.perf_counter()
    out = eng.sample(batch, 8, 1.0, 1.0, 0, [], 1)
    row["grpo_sample_s"] = time.perf_counter() - t
    samples = [{"prompt_ids": batch[s["prompt_index"]], "token_ids": s["token_ids"], "old_logprobs": s["logprobs"],
                "advantage": (1.0 if s["sample_index"] % 2 else -1.0)} for s in out]
    t = time.perf_counter()
    eng.grpo_step(samples, LOSS)
    row["grpo_update_s"] = time.perf_counter() - t
    return row


def main(argv=None):
    p = argparse.ArgumentParser(prog="lora_trainer.tagger_bench", description=__doc__.split("\n")[0])
    p.add_argument("--base-model", default="")
    p.add_argument("--turns", required=True, help="comma-separated conversation JSONL files (normalized schema)")
    p.add_argument("--limit", type=int, default=128, help="turns used (0 = all)")
    p.add_argument("--settings", default="1x256,2x256,1x128,0x256")
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    base = a.base_model or tagger.default_base_model()
    turns = load_turns(a.turns.split(","), a.limit)
    print(f"# {len(turns)} turns, torch threads {torch.get_num_threads()}, load average at start {os.getloadavg()}")
    rows = []
    for s in a.settings.split(","):
        layers, window = (int(x) for x in s.split("x"))
        rows.append(bench(base, turns, layers, window))
        print(json.dumps(rows[-1]), flush=True)
    print(f"# load average at end {os.getloadavg()}")
    keys = ["setting", "trainable", "tokens_mean", "views_s", "cache_fill_s", "sft_epoch_s", "grpo_sample_s", "grpo_update_s"]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(f"{r[k]:.2f}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
