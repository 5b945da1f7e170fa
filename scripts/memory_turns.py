"""Memory on against memory off, turn by turn, from one `himes eval` run with
`--memory off,on` (issue 38, item 3: which turns gain, which lose, and what
the activated memories were).

For each rewriter in the run's turns.parquet the turns judged in both systems
are paired by (conversation, turn):

- how many turns the re-rank changed at all (the top 10 differ), and how many
  gained, lost or kept NDCG@3 and Recall@10;
- the mean difference with a 95% cluster-bootstrap interval over
  conversations and a sign-flip p (scripts/memory_finetune.py's `paired`,
  which mirrors internal/stats.Paired);
- what moved in the top 3: passages that entered it with memory on, split
  into judged relevant (grade >= 1, the metrics' rule) and not, and the same
  for the passages that left it;
- the largest gains and losses with the question, the rewrite, the activated
  memories and the top 3 on either side (relevant passages marked `*`).

    python scripts/memory_turns.py --eval RUN_DIR --data ../shared/data/conversations/cast2020.jsonl [--show 3] [--json out.json]

RUN_DIR is the eval's --out. Bad input is an error naming the file (and the
line of --data). It needs pyarrow (the project venv: scripts/ci/python-env.sh).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory_finetune import paired  # noqa: E402 - the script's sibling; imports no torch

Key = Tuple[str, int]
METRICS = ("ndcg_cut_3", "recall_10")


class TurnsError(Exception):
    """Bad input: the message names the file."""


def load_qrels(path: str) -> Dict[Key, Dict[str, int]]:
    """(conversation, turn) → passage id → grade, as datasets.Turn.Qrels reads
    them: unknown relevance counts as 1."""
    out: Dict[Key, Dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise TurnsError(f"{path}:{n}: not JSON: {e}") from e
            for field in ("conv_id", "turn"):
                if field not in rec:
                    raise TurnsError(f"{path}:{n}: field {field}: missing")
            grades: Dict[str, int] = {}
            for p in rec.get("passages") or []:
                if "id" not in p:
                    raise TurnsError(f"{path}:{n}: field passages.id: missing")
                rel = p.get("relevance")
                grades[str(p["id"])] = 1 if rel is None else int(rel)
            key = (str(rec["conv_id"]), turn_ordinal(rec, f"{path}:{n}"))
            if key in out:
                raise TurnsError(f"{path}:{n}: field turn: conversation {key[0]} has turn {key[1]} twice")
            out[key] = grades
    return out


def turn_ordinal(rec: Dict[str, Any], where: str) -> int:
    """The turn number turns.parquet holds, as datasets.Turn reads it: an
    integer (or a string of one) as it is; a label such as CAsT 2022's "1-3"
    becomes the turn's position, the user messages in its history + 1."""
    t = rec["turn"]
    if isinstance(t, bool):
        raise TurnsError(f"{where}: field turn: {t!r} is not a number or label")
    if isinstance(t, int):
        return t
    if isinstance(t, str) and t.strip():
        try:
            return int(t)
        except ValueError:
            return 1 + sum(1 for m in rec.get("history") or [] if m.get("role") == "user")
    raise TurnsError(f"{where}: field turn: {t!r} is not a number or label")


Row = Dict[str, Any]


def load_rows(path: str) -> Dict[Tuple[str, bool], Dict[Key, Row]]:
    """(rewriter, memory) → (conversation, turn) → the turn's row."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - only when run

    if not os.path.exists(path):
        raise TurnsError(f"{path}: missing (is --eval a `himes eval --out` directory?)")
    t = pq.read_table(path).to_pydict()
    need = ("rewriter", "memory", "conv_id", "turn", "question", "rewrite", "top_passages", "memories") + METRICS
    for col in need:
        if col not in t:
            raise TurnsError(f"{path}: no column {col!r}")
    out: Dict[Tuple[str, bool], Dict[Key, Row]] = {}
    for i in range(len(t["conv_id"])):
        row = {c: t[c][i] for c in need}
        side = out.setdefault((str(row["rewriter"]), bool(row["memory"])), {})
        key = (str(row["conv_id"]), int(row["turn"]))
        if key in side:
            raise TurnsError(f"{path}: turn {key[0]}/{key[1]} twice for rewriter {row['rewriter']} memory {row['memory']}")
        side[key] = row
    return out


def value(row: Row, metric: str) -> Optional[float]:
    v = row[metric]
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def compare(off: Dict[Key, Row], on: Dict[Key, Row], qrels: Dict[Key, Dict[str, int]], show: int) -> Dict[str, Any]:
    """Memory on − off over the turns judged in both."""
    keys = sorted(k for k in set(off) & set(on) if value(off[k], METRICS[0]) is not None and value(on[k], METRICS[0]) is not None)
    if not keys:
        raise TurnsError("no turn judged with memory both off and on")
    rep: Dict[str, Any] = {"turns": len(keys)}
    rep["top10_changed"] = sum(1 for k in keys if list(off[k]["top_passages"] or []) != list(on[k]["top_passages"] or []))
    rep["with_memories"] = sum(1 for k in keys if on[k]["memories"])
    convs: Dict[str, List[Key]] = {}
    for k in keys:
        convs.setdefault(k[0], []).append(k)
    diffs: Dict[str, List[float]] = {}
    for metric in METRICS:
        d = diffs[metric] = [value(on[k], metric) - value(off[k], metric) for k in keys]  # type: ignore[operator]
        on_g = [[value(on[k], metric) for k in ks] for ks in convs.values()]
        off_g = [[value(off[k], metric) for k in ks] for ks in convs.values()]
        p = paired(on_g, off_g)  # type: ignore[arg-type]
        rep[metric] = {
            "gain": sum(x > 1e-12 for x in d),
            "loss": sum(x < -1e-12 for x in d),
            "mean_diff": p["diff"],
            "lo": p["ci_lo"],
            "hi": p["ci_hi"],
            "p": p["p_value"],
        }
    entered = {"relevant": 0, "not": 0}
    left = {"relevant": 0, "not": 0}
    for k in keys:
        rel = qrels.get(k, {})
        a = list(off[k]["top_passages"] or [])[:3]
        b = list(on[k]["top_passages"] or [])[:3]
        for pid in set(b) - set(a):
            entered["relevant" if rel.get(pid, 0) >= 1 else "not"] += 1
        for pid in set(a) - set(b):
            left["relevant" if rel.get(pid, 0) >= 1 else "not"] += 1
    rep["top3_entered"], rep["top3_left"] = entered, left

    def example(d: float, k: Key) -> Dict[str, Any]:
        rel = qrels.get(k, {})
        mark = lambda ids: [f"{pid}{'*' if rel.get(pid, 0) >= 1 else ''}" for pid in list(ids or [])[:3]]  # noqa: E731
        return {
            "conv_id": k[0], "turn": k[1], "delta_ndcg_cut_3": d,
            "question": on[k]["question"], "rewrite": on[k]["rewrite"],
            "memories": list(on[k]["memories"] or []),
            "top3_off": mark(off[k]["top_passages"]), "top3_on": mark(on[k]["top_passages"]),
        }

    deltas = sorted(zip(diffs[METRICS[0]], keys))
    rep["largest_losses"] = [example(d, k) for d, k in deltas[:show] if d < -1e-12]
    rep["largest_gains"] = [example(d, k) for d, k in reversed(deltas[-show:]) if d > 1e-12]
    return rep


def report(eval_dir: str, data: str, show: int = 3) -> Dict[str, Any]:
    rows = load_rows(os.path.join(eval_dir, "turns.parquet"))
    qrels = load_qrels(data)
    out: Dict[str, Any] = {}
    for rewriter in sorted({r for r, _ in rows}):
        if (rewriter, False) not in rows or (rewriter, True) not in rows:
            raise TurnsError(f"{os.path.join(eval_dir, 'turns.parquet')}: rewriter {rewriter} lacks memory off or on (run with --memory off,on)")
        out[rewriter] = compare(rows[(rewriter, False)], rows[(rewriter, True)], qrels, show)
    return out


def text(rep: Dict[str, Any]) -> str:
    lines = []
    for rewriter, r in rep.items():
        lines.append(f"## {rewriter}: {r['turns']} judged turns, memories on {r['with_memories']}, top 10 changed on {r['top10_changed']}")
        for m in METRICS:
            x = r[m]
            lines.append(f"{m}: on − off {x['mean_diff']:+.4f} [{x['lo']:+.4f}, {x['hi']:+.4f}] p {x['p']:.3f}; gain {x['gain']}, loss {x['loss']}")
        e, lft = r["top3_entered"], r["top3_left"]
        lines.append(f"top 3: entered {e['relevant']} relevant + {e['not']} not; left {lft['relevant']} relevant + {lft['not']} not")
        for label, xs in (("loss", r["largest_losses"]), ("gain", r["largest_gains"])):
            for x in xs:
                lines.append(f"- {label} {x['conv_id']}/{x['turn']} {x['delta_ndcg_cut_3']:+.3f}: {x['question']!r} → {x['rewrite']!r}")
                lines.append(f"  memories: {x['memories']}")
                lines.append(f"  top 3 off {x['top3_off']} → on {x['top3_on']}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval", required=True, help="a `himes eval --memory off,on` output directory")
    ap.add_argument("--data", required=True, help="the conversations it evaluated (JSONL), for the judgments")
    ap.add_argument("--show", type=int, default=3, help="largest gains and losses to print per rewriter")
    ap.add_argument("--json", help="also write the report here")
    a = ap.parse_args(argv)
    try:
        rep = report(a.eval, a.data, a.show)
    except TurnsError as e:
        print(f"memory_turns: {e}", file=sys.stderr)
        return 2
    print(text(rep))
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(rep, f, indent=1)
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
