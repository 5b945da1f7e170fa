"""Memory on against off, cell by cell, side by side for several memories:
the tables of docs/EMBEDDINGS.md ("Memory on vs off on every shared set",
"The memory in its own space, and a residual memory term") from the
`himes eval --memory off,on` folders that made them.

A column is one memory setting: a label and its eval folders, in the same
order in every column (e.g. one folder per collection × method). A row is a
folder's system that has a memory-off twin (raw+memory, gold+memory, …):
its paired difference (summary.json's vs_memory_off: the mean over turns and
the 95% cluster-bootstrap interval) for each column; * marks an interval
that excludes 0. The last row counts, per column, the cells below 0, the
intervals below and above 0, and the sum of the means.

    python scripts/memory_cells.py --metric ndcg_cut_3 \\
        --column "MiniLM memory=ev/bm25-cast2020,ev/dense-cast2020" \\
        --column "LSA memory=lsa/bm25-cast2020,lsa/dense-cast2020"

Bad input is an error naming the folder: no summary.json, no system with a
memory-off twin, columns of different lengths, or a row whose systems differ
between columns.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple


class CellsError(Exception):
    """Bad input: the message names the folder or the argument."""


@dataclass(frozen=True)
class Cell:
    diff: float
    lo: float
    hi: float

    @property
    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0

    def text(self) -> str:
        star = "*" if self.excludes_zero else ""
        return f"{self.diff:+.3f} [{self.lo:+.3f}, {self.hi:+.3f}]{star}"


def read_cells(folder: str, metric: str) -> Dict[str, Cell]:
    """System name → its memory-on − memory-off cell, from folder/summary.json."""
    path = os.path.join(folder, "summary.json")
    try:
        with open(path, encoding="utf-8") as f:
            rep = json.load(f)
    except FileNotFoundError as e:
        raise CellsError(f"{path}: missing (not a himes eval folder?)") from e
    except json.JSONDecodeError as e:
        raise CellsError(f"{path}: not JSON: {e}") from e
    out: Dict[str, Cell] = {}
    for k, s in enumerate(rep.get("systems") or []):
        vs = s.get("vs_memory_off")
        if not vs:
            continue
        if metric not in vs:
            raise CellsError(f"{path}: systems[{k}] ({s.get('name')}): no {metric} in vs_memory_off (no judged passages?)")
        c = vs[metric]
        try:
            out[str(s["name"])] = Cell(float(c["diff"]), float(c["ci_lo"]), float(c["ci_hi"]))
        except (KeyError, TypeError, ValueError) as e:
            raise CellsError(f"{path}: systems[{k}].vs_memory_off.{metric}: {e!r}") from e
    if not out:
        raise CellsError(f"{path}: no system with a memory-off twin (evaluate with --memory off,on)")
    return out


def parse_column(arg: str) -> Tuple[str, List[str]]:
    label, sep, folders = arg.partition("=")
    dirs = [d.strip() for d in folders.split(",") if d.strip()]
    if not sep or not label.strip() or not dirs:
        raise CellsError(f"--column {arg!r}: want LABEL=FOLDER,FOLDER,…")
    seen = set()
    for d in dirs:
        # Twice in a column, a folder's cells would count twice in its totals.
        if os.path.realpath(d) in seen:
            raise CellsError(f"--column {label.strip()!r}: {d} is given twice")
        seen.add(os.path.realpath(d))
    return label.strip(), dirs


def table(columns: Sequence[Tuple[str, List[str]]], metric: str) -> str:
    """The Markdown table of every cell and the per-column counts."""
    n = len(columns[0][1])
    for label, dirs in columns:
        if len(dirs) != n:
            raise CellsError(f"column {label!r} has {len(dirs)} folders, {columns[0][0]!r} has {n}: give them in the same order")
    read = [[read_cells(d, metric) for d in dirs] for _, dirs in columns]
    lines = ["| run | system | " + " | ".join(label for label, _ in columns) + " |",
             "|---|---|" + "---:|" * len(columns)]
    totals = [{"below": 0, "int_below": 0, "int_above": 0, "sum": 0.0} for _ in columns]
    for i in range(n):
        names = list(read[0][i])  # the summary's order
        for j, (label, dirs) in enumerate(columns):
            if sorted(read[j][i]) != sorted(names):
                raise CellsError(f"{dirs[i]}: systems {sorted(read[j][i])}, but {columns[0][1][i]} has {sorted(names)}")
        run = os.path.basename(os.path.normpath(columns[0][1][i]))
        for name in names:
            cells = [read[j][i][name] for j in range(len(columns))]
            for t, c in zip(totals, cells):
                t["below"] += c.diff < 0
                t["int_below"] += c.hi < 0
                t["int_above"] += c.lo > 0
                t["sum"] += c.diff
            lines.append(f"| {run} | {name} | " + " | ".join(c.text() for c in cells) + " |")
    lines.append(f"| all {sum(len(r) for r in read[0])} cells | | " + " | ".join(
        f"{t['below']} below 0, {t['int_below']} interval below, {t['int_above']} above; sum {t['sum']:+.3f}"
        for t in totals) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] = ()) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--column", action="append", required=True, help="LABEL=FOLDER,FOLDER,… (repeat for each memory setting)")
    ap.add_argument("--metric", default="ndcg_cut_3", help="summary.json metric (default ndcg_cut_3)")
    a = ap.parse_args(list(argv) or None)
    try:
        sys.stdout.write(table([parse_column(c) for c in a.column], a.metric))
    except CellsError as e:
        print(f"memory_cells: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
