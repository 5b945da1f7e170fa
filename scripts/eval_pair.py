"""Two recipes' `himes eval` folders, one per seed, paired by turn: e.g. SFT
alone against SFT then GRPO on the same seeded held-out split
(`data.eval_fraction`), where each seed holds out different conversations.

The i-th folder of --a is paired with the i-th of --b (the same seed, so the
same held-out turns: a turn judged in one and not the other is an error
naming both folders). Every (seed, turn) is one unit and (seed,
conversation) one cluster of the 95% cluster-bootstrap interval and of the
sign-flip p-value (transfer_pair.compare, which mirrors
internal/stats.Paired).

    python scripts/eval_pair.py --a rl_1/heldout,rl_2/heldout,rl_3/heldout \\
        --b sft_1/heldout,sft_2/heldout,sft_3/heldout --metrics recall_10,ndcg_cut_3,recip_rank

With --ledgers RUN1,RUN2,RUN3 (training run folders, one per seed) only the
turns each run rolled out during training are kept: evaluate both policies on
the whole data (`himes eval --data`) and pair them on the turns they trained on.

It needs pyarrow (the project venv: scripts/ci/python-env.sh prints it).
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import Dict, List, Optional, Set, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from transfer_pair import PairError, compare, difference, policy_values  # noqa: E402 - the script's sibling

Key = Tuple[str, int]


def ledger_turns(run: str) -> Set[Key]:
    """The (conversation, turn) pairs a training run rolled out: its ledger's
    prompts, the turns it trained on."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - only when run

    files = sorted(glob.glob(os.path.join(run, "ledger", "*.parquet")))
    if not files:
        raise PairError(f"{os.path.join(run, 'ledger')}: no ledger chunk (*.parquet)")
    out: Set[Key] = set()
    for f in files:
        t = pq.read_table(f, columns=["conv_id", "turn"]).to_pydict()
        out.update((str(c), int(n)) for c, n in zip(t["conv_id"], t["turn"]))
    return out


def pooled(a_dirs: List[str], b_dirs: List[str], metric: str, system_a: str, system_b: str,
           only: Optional[List[Set[Key]]] = None) -> Tuple[Dict[Key, float], Dict[Key, float]]:
    """Each folder pair's turns, keyed by (seed index/conversation, turn) so
    that a conversation held out by two seeds is two clusters; with only, seed
    i keeps the turns in only[i]."""
    if len(a_dirs) != len(b_dirs):
        raise PairError(f"{len(a_dirs)} folders for A but {len(b_dirs)} for B: one each per seed")
    if only is not None and len(only) != len(a_dirs):
        raise PairError(f"{len(only)} ledgers for {len(a_dirs)} folder pairs: one each per seed")
    a_all: Dict[Key, float] = {}
    b_all: Dict[Key, float] = {}
    for i, (da, db) in enumerate(zip(a_dirs, b_dirs)):
        va = policy_values(os.path.join(da, "turns.parquet"), metric, system_a)
        vb = policy_values(os.path.join(db, "turns.parquet"), metric, system_b)
        if only is not None:
            va = {k: v for k, v in va.items() if k in only[i]}
            vb = {k: v for k, v in vb.items() if k in only[i]}
            if not va:
                raise PairError(f"{da}: none of its judged turns is in ledger {i + 1}'s turns")
        if set(va) != set(vb):
            only = sorted(set(va) ^ set(vb))[0]
            raise PairError(f"{da} and {db}: not the same judged turns for {metric} "
                            f"({len(va)} against {len(vb)}; e.g. {only[0]}/{only[1]}): not the same seed or split?")
        for (conv, turn), v in va.items():
            a_all[(f"{i}/{conv}", turn)] = v
            b_all[(f"{i}/{conv}", turn)] = vb[(conv, turn)]
    return a_all, b_all


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="comma-separated himes eval --out folders, one per seed")
    p.add_argument("--b", required=True, help="the baseline's folders, in the same seed order")
    p.add_argument("--system-a", default="policy", help="the turns.parquet system of A (default policy)")
    p.add_argument("--system-b", default="policy")
    p.add_argument("--metrics", default="recall_10,ndcg_cut_3", help="turns.parquet columns")
    p.add_argument("--ledgers", default="", help="training run folders, one per seed: keep only the turns "
                   "each trained on (its ledger's), e.g. to pair two policies on their training turns")
    a = p.parse_args(argv)
    a_dirs = [d.strip() for d in a.a.split(",") if d.strip()]
    b_dirs = [d.strip() for d in a.b.split(",") if d.strip()]
    ledgers = [r.strip() for r in a.ledgers.split(",") if r.strip()]
    try:
        if len(a_dirs) != len(b_dirs):
            raise PairError(f"{len(a_dirs)} folders for A but {len(b_dirs)} for B: one each per seed")
        for flag, dirs in (("--a", a_dirs), ("--b", b_dirs), ("--ledgers", ledgers)):
            once_each(flag, dirs)
        only = [ledger_turns(r) for r in ledgers] or None
        rows = []
        for m in [m.strip() for m in a.metrics.split(",") if m.strip()]:
            r = compare(*pooled(a_dirs, b_dirs, m, a.system_a, a.system_b, only))
            rows.append(f"| {m} | {r['mean_a']:.3f} | {r['mean_b']:.3f} | {difference(r)} |")
    except PairError as e:
        print(f"eval_pair: {e}", file=sys.stderr)
        return 1
    # Printed only once every metric is computed: an error leaves no table.
    print(f"A = {a.system_a} in {','.join(a_dirs)}; B = {a.system_b} in {','.join(b_dirs)}; "
          "A − B paired by (seed, turn), 95% cluster-bootstrap interval over (seed, conversation), p"
          + (f"; only the turns in the ledgers of {a.ledgers}" if only else ""))
    print()
    print("| metric | A | B | A − B |")
    print("|---|---:|---:|---|")
    for row in rows:
        print(row)
    return 0


def once_each(flag: str, dirs: List[str]) -> None:
    """A folder given twice in one list would count its seed twice: twice the
    turns and conversations, intervals too narrow by about a factor of √2."""
    seen: Dict[str, str] = {}
    for d in dirs:
        key = os.path.realpath(d)
        if key in seen:
            also = f" (also as {seen[key]})" if seen[key] != d else ""
            raise PairError(f"{flag}: {d} is given twice{also}: one folder per seed")
        seen[key] = d


if __name__ == "__main__":
    sys.exit(main())
