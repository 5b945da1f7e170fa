"""scripts/best_of_n.py on a hand-made ledger: the best sample by reward,
ties to fewer words then earlier, failed rollouts left out, CAsT 2022's
string turn labels matched by ordinal, and errors that name file and line."""

import json
import os

import pytest

from .conftest import load_script

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def bn():
    return load_script("best_of_n")


def write_ledger(run, rows):
    """rows: (step, sample, conv_id, turn, question, rewrite, reward, error)."""
    os.makedirs(os.path.join(run, "ledger"), exist_ok=True)
    cols = list(zip(*rows))
    pq.write_table(pa.table({"step": pa.array(cols[0], pa.int64()), "sample_index": pa.array(cols[1], pa.int64()),
                             "conv_id": list(cols[2]), "turn": pa.array(cols[3], pa.int64()),
                             "question": list(cols[4]), "rewrite": list(cols[5]),
                             "reward": pa.array(cols[6], pa.float64()), "error": list(cols[7])}),
                   os.path.join(run, "ledger", f"steps-{rows[0][0]:06d}.parquet"))


def write_data(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def test_best_sample_replaces_the_rewrite(bn, tmp_path):
    run = str(tmp_path / "run")
    write_ledger(run, [
        (1, 0, "c1", 1, "q1", "q1 a b", 0.5, ""),
        (1, 1, "c1", 1, "q1", "q1 a", 0.5, ""),       # ties on reward, fewer words: wins
        (1, 2, "c1", 1, "q1", "q1 x y z", 0.9, "boom"),  # failed: never the best
        (1, 3, "c2", 2, "q2", "q2 late", 0.2, ""),
    ])
    write_ledger(run, [
        (2, 0, "c2", 2, "q2", "q2 first", 0.2, ""),    # ties twice with step 1: the earlier wins
        (2, 1, "c2", 2, "q2", "q2 worse", 0.1, ""),
        (2, 2, "c3", 2, "and this?", "and this? topic", 1.0, ""),
    ])
    best = bn.best_rewrites(run)
    assert best == {("c1", 1): ("q1 a", "q1", 0.5), ("c2", 2): ("q2 late", "q2", 0.2),
                    ("c3", 2): ("and this? topic", "and this?", 1.0)}
    data, out = str(tmp_path / "d.jsonl"), str(tmp_path / "o.jsonl")
    write_data(data, [
        {"conv_id": "c1", "turn": 1, "question": "q1", "rewrite": "human 1", "history": []},
        {"conv_id": "c1", "turn": 2, "question": "q1b", "rewrite": "human 1b", "history": []},  # not rolled out
        {"conv_id": "c2", "turn": "2", "question": "q2", "rewrite": "human 2", "history": []},
        # a CAsT 2022 label: ordinal = user messages in the history + 1 = 2
        {"conv_id": "c3", "turn": "1-3", "question": "and this?", "rewrite": "human 3",
         "history": [{"role": "user", "content": "topic?"}, {"role": "assistant", "content": "yes"}]},
    ])
    n, mean = bn.rewrite_file(data, out, best)
    assert n == 3 and mean == pytest.approx((0.5 + 0.2 + 1.0) / 3)
    got = [json.loads(x)["rewrite"] for x in open(out)]
    assert got == ["q1 a", "human 1b", "q2 late", "and this? topic"]


def test_errors_name_file_and_line_and_leave_nothing(bn, tmp_path, capsys):
    run = str(tmp_path / "run")
    write_ledger(run, [(1, 0, "c1", 1, "q1", "q1 a", 0.5, "")])
    data, out = str(tmp_path / "d.jsonl"), str(tmp_path / "o.jsonl")
    write_data(data, [{"conv_id": "c0", "turn": 1, "question": "x", "rewrite": "y"},
                      {"conv_id": "c1", "turn": 1, "question": "another", "rewrite": "y"}])
    assert bn.main(["--run", run, "--data", data, "--out", out]) == 1
    assert "d.jsonl:2: question differs" in capsys.readouterr().err
    assert not os.path.exists(out) and not os.path.exists(out + ".tmp")
    write_data(data, [{"conv_id": "c0", "turn": 1, "question": "x", "rewrite": "y"}])
    assert bn.main(["--run", run, "--data", data, "--out", out]) == 1
    assert "1 of the ledger's 1 turns are not in it" in capsys.readouterr().err
    with open(data, "w") as f:
        f.write('{"conv_id": "c1", "turn": 1, "question": "q1"}\n{oops\n')
    assert bn.main(["--run", run, "--data", data, "--out", out]) == 1
    assert "d.jsonl:2: not JSON" in capsys.readouterr().err
    assert bn.main(["--run", str(tmp_path / "none"), "--data", data, "--out", out]) == 1
    assert "no ledger chunk" in capsys.readouterr().err


def test_out_may_not_be_the_data(bn, tmp_path, capsys):
    """Written over its input, the copy would replace the human rewrites."""
    run = str(tmp_path / "run")
    write_ledger(run, [(1, 0, "c1", 1, "q1", "q1 a", 0.5, "")])
    data = str(tmp_path / "d.jsonl")
    write_data(data, [{"conv_id": "c1", "turn": 1, "question": "q1", "rewrite": "human"}])
    before = open(data).read()
    assert bn.main(["--run", run, "--data", data, "--out", str(tmp_path / "." / "d.jsonl")]) == 1
    assert "is --data itself" in capsys.readouterr().err
    assert open(data).read() == before
