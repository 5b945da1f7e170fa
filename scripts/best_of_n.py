"""One round of expert iteration (RAFT / ReST): a copy of a dataset whose
`rewrite` (the SFT target) is, for every turn a run rolled out, the best of
that run's sampled rewrites instead of the human one.

The best sample of a turn is the one with the highest reward in the run's
ledger; ties go to the rewrite with fewer words, then to the earliest
(step, sample). Failed rollouts are left out. Turns the run never rolled out
keep their line unchanged. Train on the output with `grpo.steps=0` (SFT only)
to ask whether the policy can *imitate* rewrites better than the human ones,
which separates what RL fails to find from what the policy cannot express
(docs/RESULTS.md, "In domain, on a held-out split").

    python scripts/best_of_n.py --run RUN --data all4.jsonl --out all4_best.jsonl

A ledger turn is matched to a data line by conversation id and turn: the
integer turn, or for a string label such as CAsT 2022's "1-3" the ordinal
himes gives it (the user messages in its history, plus one); a matched line
whose question differs from the ledger's is an error naming the file and line.
It needs pyarrow (the project venv: scripts/ci/python-env.sh prints it).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Dict, List, Tuple

Key = Tuple[str, int]


class BestError(Exception):
    """Bad input: the message names the file (and line)."""


def best_rewrites(run: str) -> Dict[Key, Tuple[str, str, float]]:
    """(conversation, turn) → (best rewrite, the question, its reward) over
    the run's ledger."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - only when run

    files = sorted(glob.glob(os.path.join(run, "ledger", "*.parquet")))
    if not files:
        raise BestError(f"{os.path.join(run, 'ledger')}: no ledger chunk (*.parquet)")
    best: Dict[Key, Tuple[Tuple[float, int, int, int], str, str]] = {}
    cols = ["step", "sample_index", "conv_id", "turn", "question", "rewrite", "reward", "error"]
    for f in files:
        t = pq.read_table(f, columns=cols).to_pydict()
        for i in range(len(t["step"])):
            if t["error"][i]:
                continue
            k = (str(t["conv_id"][i]), int(t["turn"][i]))
            rw = str(t["rewrite"][i])
            # Larger is better: reward, then fewer words, then earlier.
            rank = (float(t["reward"][i]), -len(rw.split()), -int(t["step"][i]), -int(t["sample_index"][i]))
            if k not in best or rank > best[k][0]:
                best[k] = (rank, rw, str(t["question"][i]))
    return {k: (rw, q, rank[0]) for k, (rank, rw, q) in best.items()}


def ordinal(line: dict) -> int:
    """The turn number himes gives a line: an integer turn as it is, a label
    the user messages of its history plus one (datasets.Turn's TurnLabel)."""
    raw = line.get("turn")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
        return int(raw)
    return sum(1 for m in line.get("history") or [] if m.get("role") == "user") + 1


def rewrite_file(data: str, out: str, best: Dict[Key, Tuple[str, str, float]]) -> Tuple[int, float]:
    """Writes data with the best rewrites to out (a temporary file renamed
    into place: nothing partial is left); returns the lines replaced and
    their best rewards' mean."""
    n, total = 0, 0.0
    tmp = out + ".tmp"
    try:
        with open(data) as src, open(tmp, "w") as dst:
            for no, raw in enumerate(src, 1):
                if not raw.strip():
                    continue
                try:
                    line = json.loads(raw)
                except json.JSONDecodeError as e:
                    raise BestError(f"{data}:{no}: not JSON: {e}") from e
                k = (str(line.get("conv_id")), ordinal(line))
                if k in best:
                    rw, q, r = best[k]
                    if line.get("question") != q:
                        raise BestError(f"{data}:{no}: question differs from the ledger's for {k[0]}/{k[1]} "
                                        f"(not the data the run trained on?)")
                    line["rewrite"] = rw
                    n += 1
                    total += r
                dst.write(json.dumps(line, ensure_ascii=False) + "\n")
        if n != len(best):
            raise BestError(f"{data}: {len(best) - n} of the ledger's {len(best)} turns are not in it "
                            "(not the data the run trained on?)")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return n, total / max(n, 1)


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="a training run folder (its ledger/)")
    p.add_argument("--data", required=True, help="the JSONL the run trained on")
    p.add_argument("--out", required=True, help="the JSONL to write")
    a = p.parse_args(argv)
    try:
        if os.path.realpath(a.out) == os.path.realpath(a.data):
            # The copy would replace the data, and with it the human rewrites.
            raise BestError(f"--out {a.out} is --data itself: write the copy elsewhere")
        n, mean = rewrite_file(a.data, a.out, best_rewrites(a.run))
    except BestError as e:
        print(f"best_of_n: {e}", file=sys.stderr)
        return 1
    print(f"{a.out}: {n} turns given their best sampled rewrite (mean reward {mean:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
