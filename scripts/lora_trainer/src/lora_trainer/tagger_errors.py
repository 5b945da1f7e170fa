"""Where a trained tagger's decisions go wrong: greedy keep/drop against the human rewrite, by term type.

    python -m lora_trainer.tagger_errors --checkpoint DIR --turns held_out.jsonl [--tagger-* flags of the run]

DIR is a checkpoint the tagger saved (the trainer's --checkpoint-dir/NAME).
A candidate is positive when it is a word of the turn's human rewrite (the
SFT target). For each type — terms of user messages, memory-only terms,
assistant-only terms, and across them capitalized terms, numbers and terms
outside the encoder's window — it prints the candidates, the positives, what
greedy decoding kept, and precision / recall of the kept terms.
"""

import argparse
import collections
import json

import torch

from . import candidates as cand
from . import cli, tagger


def term_types(c: cand.Candidate, in_window: bool):
    kind = "user" if c.user else ("memory-only" if c.memory_only else "assistant-only")
    out = [kind, "all"]
    if c.upper:
        out.append("capitalized")
    if c.term.isdecimal():
        out.append("number")
    if not in_window:
        out.append("outside window")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="lora_trainer.tagger_errors", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--turns", required=True, help="a conversation JSONL (normalized schema) with human rewrites")
    p.add_argument("--base-model", default="")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--lora-alpha", type=float, default=32.0)
    p.add_argument("--lora-target-modules", default="")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=1)
    tagger.add_flags(p)
    a = p.parse_args(argv)
    torch.set_num_threads(cli.cpu_threads(a.threads))
    eng = tagger.build_engine(a, "cpu", tagger.Limits())
    eng.load_from(a.checkpoint)
    counts = collections.defaultdict(lambda: collections.Counter())
    with open(a.turns, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if not rec.get("question") or not rec.get("rewrite"):
                continue
            d = {"history": [{"role": m["role"], "content": m["text"]} for m in rec["history"]], "question": rec["question"]}
            v = eng.encode_prompt({"dialogue": d}, "turn")
            if v.n == 0:
                continue
            kept = eng.sample([v], 1, 0.0, 1.0, 0, [], 0)[0]["token_ids"]
            gold = set(cand.tokens(rec["rewrite"]))
            for c, k, w in zip(v.cands, kept, v.in_window.tolist()):
                pos = c.term in gold
                for t in term_types(c, w > 0):
                    n = counts[t]
                    n["candidates"] += 1
                    n["positive"] += pos
                    n["kept"] += k
                    n["kept positive"] += k and pos
    print("| term type | candidates | in the human rewrite | kept | precision | recall |")
    print("|---|---:|---:|---:|---:|---:|")
    for t in ("all", "user", "memory-only", "assistant-only", "capitalized", "number", "outside window"):
        n = counts.get(t)
        if not n:
            continue
        prec = n["kept positive"] / n["kept"] if n["kept"] else float("nan")
        rec_ = n["kept positive"] / n["positive"] if n["positive"] else float("nan")
        print(f"| {t} | {n['candidates']} | {n['positive']} | {n['kept']} | {prec:.2f} | {rec_:.2f} |")


if __name__ == "__main__":
    main()
