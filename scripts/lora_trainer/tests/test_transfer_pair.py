"""scripts/transfer_pair.py on hand-made transfer folders: the per-turn seed
mean, the pairing by (conversation, turn), unjudged turns left out, the
difference against a hand computation, and the errors that name the file."""

import os

import pytest

from .conftest import load_script

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")



@pytest.fixture(scope="module")
def tp():
    return load_script("transfer_pair")


def write_run(root, fold, recipe, seed, rows):
    """rows: (system, conv_id, turn, recall_10)."""
    d = os.path.join(root, fold, f"{recipe}_seed_{seed}", "eval")
    os.makedirs(d)
    open(os.path.join(root, fold, "train.jsonl"), "w").close()
    cols = list(zip(*rows))
    pq.write_table(pa.table({"system": list(cols[0]), "conv_id": list(cols[1]), "turn": list(cols[2]),
                             "recall_10": pa.array(cols[3], type=pa.float64())}), os.path.join(d, "turns.parquet"))


def test_seed_mean_pairs_turns_and_drops_unjudged(tp, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    # A: two seeds; turn c1/2 unjudged in seed 2 (null), so it is left out everywhere.
    write_run(a, "f", "sft_grpo", 1, [("policy", "c1", 1, 1.0), ("policy", "c1", 2, 0.5), ("policy", "c2", 1, 0.0),
                                      ("raw", "c1", 1, 0.0)])
    write_run(a, "f", "sft_grpo", 2, [("policy", "c1", 1, 0.5), ("policy", "c1", 2, None), ("policy", "c2", 1, 1.0)])
    write_run(b, "f", "sft", 1, [("policy", "c1", 1, 0.25), ("policy", "c1", 2, 0.0), ("policy", "c2", 1, 0.5)])
    write_run(b, "f", "sft", 2, [("policy", "c1", 1, 0.25), ("policy", "c1", 2, 0.0), ("policy", "c2", 1, 0.5)])
    ma = tp.seed_mean(a, "f", "sft+grpo", [1, 2], "recall_10")
    assert ma == {("c1", 1): 0.75, ("c2", 1): 0.5}  # the raw system's row is not the policy's
    mb = tp.seed_mean(b, "f", "sft", [1, 2], "recall_10")
    r = tp.compare(ma, mb, resamples=200)
    # by hand: turns c1/1 (0.75 − 0.25) and c2/1 (0.5 − 0.5): mean 0.25 over 2 turns, 2 conversations
    assert r["diff"] == pytest.approx(0.25) and r["turns"] == 2 and r["conversations"] == 2
    assert r["mean_a"] == pytest.approx(0.625) and r["mean_b"] == pytest.approx(0.375)
    assert r["ci_lo"] <= r["diff"] <= r["ci_hi"]
    assert tp.folds(a) == ["f"]


def test_identical_runs_differ_by_zero(tp, tmp_path):
    rows = [("policy", f"c{i}", t, (i * 7 + t) % 5 / 4) for i in range(6) for t in range(1, 4)]
    for root in ("a", "b"):
        write_run(str(tmp_path / root), "f", "sft", 1, rows)
    r = tp.compare(tp.seed_mean(str(tmp_path / "a"), "f", "sft", [1], "recall_10"),
                   tp.seed_mean(str(tmp_path / "b"), "f", "sft", [1], "recall_10"), resamples=200)
    assert r["diff"] == 0 and r["ci_lo"] == 0 and r["ci_hi"] == 0 and r["p_value"] == 1.0


def test_errors_name_the_file(tp, tmp_path, capsys):
    write_run(str(tmp_path / "a"), "f", "sft", 1, [("policy", "c1", 1, 1.0), ("policy", "c1", 1, 0.0)])
    with pytest.raises(tp.PairError, match=r"turns\.parquet: turn c1/1 twice"):
        tp.seed_mean(str(tmp_path / "a"), "f", "sft", [1], "recall_10")
    write_run(str(tmp_path / "a"), "g", "sft", 1, [("policy", "c1", 1, 1.0)])
    with pytest.raises(tp.PairError, match=r"g/sft_seed_2/eval/turns\.parquet: missing"):
        tp.seed_mean(str(tmp_path / "a"), "g", "sft", [1, 2], "recall_10")
    with pytest.raises(tp.PairError, match=r"no column 'ndcg_cut_3'"):
        tp.seed_mean(str(tmp_path / "a"), "g", "sft", [1], "ndcg_cut_3")
    write_run(str(tmp_path / "b"), "f", "sft", 1, [("policy", "c1", 1, 1.0)])
    rc = tp.main(["--a", str(tmp_path / "b"), "--recipe-a", "sft", "--b", str(tmp_path / "b"), "--recipe-b", "sft+grpo",
                  "--seeds", "1"])
    assert rc == 1 and "sft_grpo_seed_1" in capsys.readouterr().err


def test_seeds_each_once_and_no_partial_table(tp, tmp_path, capsys):
    """A seed given twice would weigh twice in each turn's mean; an error
    after the first fold printed half a table."""
    b = str(tmp_path / "b")
    write_run(b, "f", "sft", 1, [("policy", "c1", 1, 1.0)])
    base = ["--a", b, "--recipe-a", "sft", "--b", b, "--recipe-b", "sft"]
    for seeds, want in (("1,1", "seed 1 is given twice"), ("1,x", "'x' is not an integer"), (",", "no seed given")):
        rc = tp.main(base + ["--seeds", seeds])
        cap = capsys.readouterr()
        assert rc == 1 and want in cap.err and cap.out == "", (seeds, cap.err)
    write_run(b, "g", "sft", 1, [("policy", "c1", 1, 1.0)])
    os.remove(os.path.join(b, "g", "sft_seed_1", "eval", "turns.parquet"))
    rc = tp.main(base + ["--seeds", "1", "--metrics", "recall_10"])  # fold f pairs, fold g fails
    cap = capsys.readouterr()
    assert rc == 1 and "g/sft_seed_1/eval/turns.parquet: missing" in cap.err and cap.out == ""
