"""scripts/eval_pair.py on hand-made eval folders: seed i of A paired with
seed i of B, a conversation held out by two seeds counted as two clusters,
the difference against a hand computation, another system than the policy,
and the errors that name the folders."""

import os

import pytest

from .conftest import load_script

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def ep():
    return load_script("eval_pair")


def write_eval(d, rows):
    """rows: (system, conv_id, turn, ndcg_cut_3)."""
    os.makedirs(d)
    cols = list(zip(*rows))
    pq.write_table(pa.table({"system": list(cols[0]), "conv_id": list(cols[1]), "turn": list(cols[2]),
                             "ndcg_cut_3": pa.array(cols[3], type=pa.float64())}), os.path.join(d, "turns.parquet"))


def test_seeds_pair_index_by_index_and_clusters_per_seed(ep, tmp_path):
    # Seed 1 holds out c1 (two turns); seed 2 holds out c1 again and c2.
    a1, a2, b1, b2 = (str(tmp_path / n) for n in ("a1", "a2", "b1", "b2"))
    write_eval(a1, [("policy", "c1", 1, 1.0), ("policy", "c1", 2, 0.5), ("raw", "c1", 1, 0.0)])
    write_eval(b1, [("policy", "c1", 1, 0.5), ("policy", "c1", 2, 0.5), ("raw", "c1", 1, 0.0)])
    write_eval(a2, [("policy", "c1", 1, 0.0), ("policy", "c2", 1, 1.0), ("policy", "c2", 2, None)])
    write_eval(b2, [("policy", "c1", 1, 0.25), ("policy", "c2", 1, 0.75), ("policy", "c2", 2, None)])
    a, b = ep.pooled([a1, a2], [b1, b2], "ndcg_cut_3", "policy", "policy")
    assert set(a) == {("0/c1", 1), ("0/c1", 2), ("1/c1", 1), ("1/c2", 1)}  # the unjudged c2/2 is left out
    r = ep.compare(a, b, resamples=200)
    # by hand: differences 0.5, 0, -0.25, 0.25 over 4 turns in 3 (seed, conversation) clusters
    assert r["diff"] == pytest.approx(0.125) and r["turns"] == 4 and r["conversations"] == 3
    assert r["mean_a"] == pytest.approx(0.625) and r["mean_b"] == pytest.approx(0.5)
    # the raw rows of seed 1 against the policy's: 0 − 1 and no c1/2 row for raw → not the same turns
    with pytest.raises(ep.PairError, match="not the same judged turns"):
        ep.pooled([a1], [b1], "ndcg_cut_3", "raw", "policy")


def test_identical_folders_differ_by_zero(ep, tmp_path, capsys):
    rows = [("policy", f"c{i}", t, (i * 7 + t) % 5 / 4) for i in range(5) for t in range(1, 4)]
    write_eval(str(tmp_path / "a"), rows)
    write_eval(str(tmp_path / "b"), rows)
    r = ep.compare(*ep.pooled([str(tmp_path / "a")], [str(tmp_path / "b")], "ndcg_cut_3", "policy", "policy"),
                   resamples=200)
    assert r["diff"] == 0 and r["ci_lo"] == 0 and r["ci_hi"] == 0 and r["p_value"] == 1.0
    # the table row: both means (by hand: the 15 values sum to 7.5), the difference, its interval, p, the turns
    assert ep.main(["--a", str(tmp_path / "a"), "--b", str(tmp_path / "b"), "--metrics", "ndcg_cut_3"]) == 0
    out = capsys.readouterr().out
    assert "| ndcg_cut_3 | 0.500 | 0.500 | +0.000 [+0.000, +0.000], p 1.000 (15 turns) |" in out, out


def test_errors_name_the_folders(ep, tmp_path, capsys):
    write_eval(str(tmp_path / "a"), [("policy", "c1", 1, 1.0), ("policy", "c1", 2, 0.0)])
    write_eval(str(tmp_path / "b"), [("policy", "c1", 1, 1.0)])
    rc = ep.main(["--a", str(tmp_path / "a"), "--b", str(tmp_path / "b"), "--metrics", "ndcg_cut_3"])
    err = capsys.readouterr().err
    assert rc == 1 and str(tmp_path / "a") in err and "c1/2" in err
    rc = ep.main(["--a", str(tmp_path / "a"), "--b", str(tmp_path / "missing"), "--metrics", "ndcg_cut_3"])
    assert rc == 1 and "missing/turns.parquet: missing" in capsys.readouterr().err
    rc = ep.main(["--a", str(tmp_path / "a"), "--b", f"{tmp_path / 'b'},{tmp_path / 'b'}"])
    assert rc == 1 and "1 folders for A but 2 for B" in capsys.readouterr().err
    # a metric the files lack: an error and no partial table
    write_eval(str(tmp_path / "b2"), [("policy", "c1", 1, 1.0), ("policy", "c1", 2, 0.0)])
    rc = ep.main(["--a", str(tmp_path / "a"), "--b", str(tmp_path / "b2"), "--metrics", "ndcg_cut_3,nope"])
    cap = capsys.readouterr()
    assert rc == 1 and "no column 'nope'" in cap.err and cap.out == ""


def test_a_folder_twice_is_refused(ep, tmp_path, capsys):
    """The same seed's folder twice doubled its turns and conversations: an
    interval too narrow, a p-value too small."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_eval(a, [("policy", f"c{i}", 1, i % 2) for i in range(6)])
    write_eval(b, [("policy", f"c{i}", 1, 0.0) for i in range(6)])
    for argv, flag in ((["--a", f"{a},{b}", "--b", f"{b},{tmp_path / 'b' / '.'}"], "--b"),
                       (["--a", f"{a},{a}", "--b", f"{b},{a}"], "--a"),
                       (["--a", a, "--b", b, "--ledgers", f"{a},{a}"], "--ledgers")):
        rc = ep.main(argv + ["--metrics", "ndcg_cut_3"])
        cap = capsys.readouterr()
        assert rc == 1 and f"{flag}: " in cap.err and "is given twice" in cap.err and cap.out == "", cap.err


def test_ledgers_keep_the_training_turns(ep, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_eval(a, [("policy", "c1", 1, 1.0), ("policy", "c1", 2, 0.0), ("policy", "c2", 1, 0.5)])
    write_eval(b, [("policy", "c1", 1, 0.0), ("policy", "c1", 2, 1.0), ("policy", "c2", 1, 0.5)])
    run = tmp_path / "run"
    (run / "ledger").mkdir(parents=True)
    # Two chunks; c1/1 rolled out twice (two steps), c2/1 once; c1/2 never (held out).
    pq.write_table(pa.table({"conv_id": ["c1", "c2"], "turn": pa.array([1, 1], type=pa.int64())}),
                   str(run / "ledger" / "steps-000001-000001.parquet"))
    pq.write_table(pa.table({"conv_id": ["c1"], "turn": pa.array([1], type=pa.int64())}),
                   str(run / "ledger" / "steps-000002-000002.parquet"))
    assert ep.ledger_turns(str(run)) == {("c1", 1), ("c2", 1)}
    x, y = ep.pooled([a], [b], "ndcg_cut_3", "policy", "policy", [ep.ledger_turns(str(run))])
    r = ep.compare(x, y, resamples=200)
    # by hand: c1/1 (1 − 0) and c2/1 (0.5 − 0.5) → mean 0.5; the held-out c1/2 (−1) is left out
    assert r["diff"] == pytest.approx(0.5) and r["turns"] == 2
    with pytest.raises(ep.PairError, match="no ledger chunk"):
        ep.ledger_turns(str(tmp_path / "a"))
