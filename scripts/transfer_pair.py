"""One recipe of one `himes ablate transfer` against a recipe of another,
paired by turn on every left-out collection both ran (e.g. the MiniLM tagger's
shipped recipe against the embedded policy's, issue 35).

Each turn's value is the mean over the seeds of the policy's metric in the
runs' eval/turns.parquet; the difference A − B is averaged over the turns both
judged, with a 95% cluster-bootstrap interval over conversations and a
sign-flip p-value (scripts/memory_finetune.py's `paired`, which mirrors
internal/stats.Paired). A missing run is an error naming its file: a fold is
never compared on fewer seeds than asked.

    python scripts/transfer_pair.py --a /tmp/tagger --recipe-a sft+grpo \
        --b /tmp/embedded --recipe-b sft+grpo --seeds 1,2,3

It needs pyarrow (the project venv: scripts/ci/python-env.sh prints it).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory_finetune import paired  # noqa: E402 - the script's sibling; imports no torch

Key = Tuple[str, int]


class PairError(Exception):
    """Bad input: the message names the file."""


def run_dir(root: str, fold: str, recipe: str, seed: int) -> str:
    # ablate transfer names a run by its recipe with '+' as '_' (sft+grpo → sft_grpo_seed_1).
    return os.path.join(root, fold, f"{recipe.replace('+', '_')}_seed_{seed}")


def policy_values(path: str, metric: str, system: str = "policy") -> Dict[Key, float]:
    """A system's metric (the policy's by default) per (conversation, turn) in
    one eval/turns.parquet; turns without a value (unjudged: null or NaN) are
    left out."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - only when run

    if not os.path.exists(path):
        raise PairError(f"{path}: missing (did the run finish and evaluate?)")
    t = pq.read_table(path).to_pydict()
    for col in ("system", "conv_id", "turn", metric):
        if col not in t:
            raise PairError(f"{path}: no column {col!r}")
    out: Dict[Key, float] = {}
    for i, row_system in enumerate(t["system"]):
        v = t[metric][i]
        if row_system != system or v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        key = (str(t["conv_id"][i]), int(t["turn"][i]))
        if key in out:
            raise PairError(f"{path}: turn {key[0]}/{key[1]} twice for the {system}")
        out[key] = float(v)
    return out


def seed_mean(root: str, fold: str, recipe: str, seeds: List[int], metric: str) -> Dict[Key, float]:
    """Each turn's mean over the seeds; a turn must have a value in every seed's run."""
    per_seed = [policy_values(os.path.join(run_dir(root, fold, recipe, s), "eval", "turns.parquet"), metric) for s in seeds]
    keys = set(per_seed[0])
    for vals in per_seed[1:]:
        keys &= set(vals)
    return {k: sum(v[k] for v in per_seed) / len(per_seed) for k in keys}


def compare(a: Dict[Key, float], b: Dict[Key, float], resamples: int = 2000, seed: int = 1) -> Dict[str, float]:
    """A − B over the turns both have, grouped by conversation."""
    keys = sorted(set(a) & set(b))
    if not keys:
        raise PairError("no turn judged in both")
    convs: Dict[str, List[Key]] = {}
    for k in keys:
        convs.setdefault(k[0], []).append(k)
    ga = [[a[k] for k in ks] for ks in convs.values()]
    gb = [[b[k] for k in ks] for ks in convs.values()]
    out = paired(ga, gb, resamples=resamples, seed=seed)
    out["mean_a"] = sum(a[k] for k in keys) / len(keys)
    out["mean_b"] = sum(b[k] for k in keys) / len(keys)
    return out


def difference(r: Dict[str, float]) -> str:
    """compare's A − B as a table cell: the difference, its interval, p, a
    star where the interval excludes 0, and the number of turns."""
    star = " *" if r["ci_lo"] > 0 or r["ci_hi"] < 0 else ""
    return (f"{r['diff']:+.3f} [{r['ci_lo']:+.3f}, {r['ci_hi']:+.3f}], "
            f"p {r['p_value']:.3f}{star} ({int(r['turns'])} turns)")


def folds(root: str) -> List[str]:
    return sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "train.jsonl")))


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="one transfer's --out")
    p.add_argument("--recipe-a", required=True, help="sft, grpo or sft+grpo")
    p.add_argument("--b", required=True, help="the other transfer's --out (the baseline)")
    p.add_argument("--recipe-b", required=True)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--metrics", default="recall_10,ndcg_cut_3", help="turns.parquet columns")
    a = p.parse_args(argv)
    metrics = [m.strip() for m in a.metrics.split(",") if m.strip()]
    try:
        seeds = parse_seeds(a.seeds)
        common = sorted(set(folds(a.a)) & set(folds(a.b)))
        if not common:
            raise PairError(f"no left-out collection in both {a.a} and {a.b}")
        rows = []
        for fold in common:
            cells = []
            for m in metrics:
                r = compare(seed_mean(a.a, fold, a.recipe_a, seeds, m), seed_mean(a.b, fold, a.recipe_b, seeds, m))
                cells.append(f"{r['mean_a']:.3f} vs {r['mean_b']:.3f}: {difference(r)}")
            rows.append(f"| {fold} | " + " | ".join(cells) + " |")
    except PairError as e:
        print(f"transfer_pair: {e}", file=sys.stderr)
        return 1
    # Printed only once every cell is computed: an error leaves no table.
    print(f"A = {a.a} {a.recipe_a}, B = {a.b} {a.recipe_b}, seeds {a.seeds}; A − B paired by turn, 95% cluster-bootstrap interval, p")
    print()
    print("| left out | " + " | ".join(metrics) + " |")
    print("|---|" + "---:|" * len(metrics))
    for row in rows:
        print(row)
    return 0


def parse_seeds(text: str) -> List[int]:
    """--seeds as integers, each once: a seed given twice would weigh twice
    in each turn's mean over the seeds."""
    seeds: List[int] = []
    for s in (s.strip() for s in text.split(",")):
        if not s:
            continue
        try:
            n = int(s)
        except ValueError:
            raise PairError(f"--seeds: {s!r} is not an integer") from None
        if n in seeds:
            raise PairError(f"--seeds: seed {n} is given twice")
        seeds.append(n)
    if not seeds:
        raise PairError("--seeds: no seed given")
    return seeds


if __name__ == "__main__":
    sys.exit(main())
