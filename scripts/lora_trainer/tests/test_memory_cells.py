"""scripts/memory_cells.py on hand-made summary.json files: the cells, the
stars, the per-column counts and sums by hand, and the errors that name the
folder."""

import json
import os

import pytest

from .conftest import load_script


@pytest.fixture(scope="module")
def mc():
    return load_script("memory_cells")


def write_summary(d, systems):
    """systems: (name, (diff, lo, hi) or None for a memory-off system)."""
    os.makedirs(d, exist_ok=True)
    out = []
    for name, cell in systems:
        s = {"name": name}
        if cell is not None:
            s["vs_memory_off"] = {"ndcg_cut_3": {"diff": cell[0], "ci_lo": cell[1], "ci_hi": cell[2]}}
        out.append(s)
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"systems": out}, f)


def test_cells_counts_and_sums(mc, tmp_path):
    a1, a2, b1, b2 = (str(tmp_path / n) for n in ("a1", "a2", "b1", "b2"))
    write_summary(a1, [("raw", None), ("raw+memory", (0.01, 0.002, 0.02)), ("gold+memory", (-0.003, -0.006, -0.001))])
    write_summary(a2, [("raw+memory", (-0.002, -0.01, 0.005))])
    write_summary(b1, [("gold+memory", (0.004, -0.001, 0.009)), ("raw+memory", (0.0, -0.003, 0.003))])
    write_summary(b2, [("raw+memory", (0.02, 0.01, 0.03))])
    out = mc.table([("A", [a1, a2]), ("B", [b1, b2])], "ndcg_cut_3").splitlines()
    assert out[0] == "| run | system | A | B |"
    # rows in the first column's summary order; B's cells matched by name
    assert out[2] == "| a1 | raw+memory | +0.010 [+0.002, +0.020]* | +0.000 [-0.003, +0.003] |"
    assert out[3] == "| a1 | gold+memory | -0.003 [-0.006, -0.001]* | +0.004 [-0.001, +0.009] |"
    assert out[4] == "| a2 | raw+memory | -0.002 [-0.010, +0.005] | +0.020 [+0.010, +0.030]* |"
    # A: 2 below 0, 1 interval below, 1 above, sum .01 - .003 - .002 = .005
    # B: none below (0.0 is not below), 0 below, 1 above, sum .004 + 0 + .02 = .024
    assert out[5] == ("| all 3 cells | | 2 below 0, 1 interval below, 1 above; sum +0.005 | "
                      "0 below 0, 0 interval below, 1 above; sum +0.024 |")


def test_errors_name_the_folder(mc, tmp_path):
    a, b, off = str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "off")
    write_summary(a, [("raw+memory", (0.0, 0.0, 0.0))])
    write_summary(b, [("gold+memory", (0.0, 0.0, 0.0))])
    write_summary(off, [("raw", None)])
    with pytest.raises(mc.CellsError, match=r"b: systems \['gold\+memory'\]"):
        mc.table([("A", [a]), ("B", [b])], "ndcg_cut_3")
    with pytest.raises(mc.CellsError, match="off.*summary.json: no system with a memory-off twin"):
        mc.table([("A", [off])], "ndcg_cut_3")
    with pytest.raises(mc.CellsError, match="missing"):
        mc.table([("A", [str(tmp_path / "nowhere")])], "ndcg_cut_3")
    with pytest.raises(mc.CellsError, match="has 2 folders"):
        mc.table([("A", [a]), ("B", [a, b])], "ndcg_cut_3")
    with pytest.raises(mc.CellsError, match="no recall_10"):
        mc.table([("A", [a])], "recall_10")
    with pytest.raises(mc.CellsError, match="LABEL=FOLDER"):
        mc.parse_column("no-equals-sign")
    assert mc.main(["--column", "A=" + off]) == 1
    # a folder twice in a column would count its cells twice in the totals
    with pytest.raises(mc.CellsError, match=r"--column 'A': .*a is given twice"):
        mc.parse_column(f"A={a},{b},{a}")
