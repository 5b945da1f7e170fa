"""scripts/memory_turns.py on a hand-made turns.parquet: memory on against off
paired by turn, gains and losses counted by hand, the passages that enter and
leave the top 3 split by the judgments (unknown relevance counting as 1, grade
0 as not relevant), and the errors that name the file and line."""

import json
import os

import pytest

from .conftest import load_script

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")



@pytest.fixture(scope="module")
def mt():
    return load_script("memory_turns")


def write_eval(d, rows):
    """rows: (rewriter, memory, conv, turn, ndcg3, recall10, top passages, memories)."""
    os.makedirs(d, exist_ok=True)
    c = list(zip(*rows))
    pq.write_table(pa.table({
        "system": [f"{r}{'+memory' if m else ''}" for r, m in zip(c[0], c[1])],
        "rewriter": list(c[0]), "memory": list(c[1]), "conv_id": list(c[2]), "turn": list(c[3]),
        "question": [f"q {t}" for t in c[3]], "rewrite": [f"r {t}" for t in c[3]],
        "ndcg_cut_3": pa.array(c[4], type=pa.float64()), "recall_10": pa.array(c[5], type=pa.float64()),
        "top_passages": pa.array(c[6], type=pa.list_(pa.string())), "memories": pa.array(c[7], type=pa.list_(pa.string())),
    }), os.path.join(d, "turns.parquet"))


def write_data(path, turns):
    with open(path, "w") as f:
        for conv, turn, passages in turns:
            f.write(json.dumps({"conv_id": conv, "turn": turn, "passages": passages}) + "\n")


def test_pairs_counts_and_top3_moves(mt, tmp_path):
    d = str(tmp_path / "ev")
    write_eval(d, [
        # c1/1: memory promotes relevant p2 into the top 3 (gain), p9 leaves
        ("raw", False, "c1", 1, 0.2, 0.5, ["p1", "p9", "p3", "p2"], []),
        ("raw", True, "c1", 1, 0.6, 0.5, ["p1", "p2", "p3", "p9"], ["earlier question"]),
        # c1/2: memory swaps relevant p5 out for p7, judged 0 (loss)
        ("raw", False, "c1", 2, 0.5, 1.0, ["p5", "p6", "p8"], []),
        ("raw", True, "c1", 2, 0.3, 1.0, ["p7", "p6", "p8", "p5"], ["m"]),
        # c2/1: nothing changes
        ("raw", False, "c2", 1, 0.4, 0.0, ["p1"], []),
        ("raw", True, "c2", 1, 0.4, 0.0, ["p1"], []),
        # c2/2: unjudged (null) on one side, left out
        ("raw", False, "c2", 2, None, None, ["p1"], []),
        ("raw", True, "c2", 2, 0.9, 1.0, ["p2"], ["m"]),
    ])
    data = str(tmp_path / "c.jsonl")
    write_data(data, [("c1", 1, [{"id": "p2"}, {"id": "p9", "relevance": 0}]),
                      ("c1", 2, [{"id": "p5", "relevance": 3}, {"id": "p7", "relevance": 0}]),
                      ("c2", 1, [{"id": "p1", "relevance": 1}])])
    rep = mt.report(d, data, show=2)["raw"]
    assert rep["turns"] == 3 and rep["with_memories"] == 2 and rep["top10_changed"] == 2
    n = rep["ndcg_cut_3"]
    assert (n["gain"], n["loss"]) == (1, 1)
    # by hand: (+0.4 − 0.2 + 0) / 3 turns
    assert n["mean_diff"] == pytest.approx(0.2 / 3)
    assert n["lo"] <= n["mean_diff"] <= n["hi"]
    assert (rep["recall_10"]["gain"], rep["recall_10"]["loss"], rep["recall_10"]["mean_diff"]) == (0, 0, 0)
    # entered the top 3: p2 (unknown relevance = 1), p7 (grade 0); left: p9 (grade 0), p5 (grade 3)
    assert rep["top3_entered"] == {"relevant": 1, "not": 1}
    assert rep["top3_left"] == {"relevant": 1, "not": 1}
    assert [x["turn"] for x in rep["largest_gains"]] == [1] and [x["turn"] for x in rep["largest_losses"]] == [2]
    loss = rep["largest_losses"][0]
    assert loss["top3_off"] == ["p5*", "p6", "p8"] and loss["top3_on"] == ["p7", "p6", "p8"]
    assert loss["memories"] == ["m"] and loss["delta_ndcg_cut_3"] == pytest.approx(-0.2)


def test_main_writes_json_atomically(mt, tmp_path, capsys):
    d = str(tmp_path / "ev")
    write_eval(d, [("gold", False, "c", 1, 0.0, 0.0, ["a"], []), ("gold", True, "c", 1, 1.0, 1.0, ["b"], ["m"])])
    data = str(tmp_path / "c.jsonl")
    write_data(data, [("c", 1, [{"id": "b"}])])
    out = str(tmp_path / "rep.json")
    assert mt.main(["--eval", d, "--data", data, "--json", out]) == 0
    assert json.load(open(out))["gold"]["ndcg_cut_3"]["gain"] == 1
    assert not os.path.exists(out + ".tmp")
    assert "gold: 1 judged turns" in capsys.readouterr().out


def test_errors_name_the_file(mt, tmp_path, capsys):
    data = str(tmp_path / "c.jsonl")
    with open(data, "w") as f:
        f.write('{"conv_id": "c", "turn": 1, "passages": []}\n{"turn": 2}\n')
    d = str(tmp_path / "ev")
    write_eval(d, [("raw", False, "c", 1, 0.0, 0.0, ["a"], [])])
    assert mt.main(["--eval", d, "--data", data]) == 2
    assert f"{data}:2: field conv_id" in capsys.readouterr().err
    write_data(data, [("c", 1, [])])
    assert mt.main(["--eval", d, "--data", data]) == 2
    assert "lacks memory off or on" in capsys.readouterr().err
    assert mt.main(["--eval", str(tmp_path / "none"), "--data", data]) == 2
    assert "turns.parquet: missing" in capsys.readouterr().err


def test_turn_labels_become_positions(mt, tmp_path):
    # CAsT 2022 labels turns "1-3"; turns.parquet holds the position (user messages before + 1).
    data = str(tmp_path / "c.jsonl")
    with open(data, "w") as f:
        f.write(json.dumps({"conv_id": "c", "turn": "1-1", "history": [], "passages": [{"id": "a"}]}) + "\n")
        f.write(json.dumps({"conv_id": "c", "turn": "2-1", "history": [{"role": "user", "text": "x"}, {"role": "assistant", "text": "y"}],
                            "passages": [{"id": "b", "relevance": 2}]}) + "\n")
        f.write(json.dumps({"conv_id": "d", "turn": "4", "passages": []}) + "\n")
    assert mt.load_qrels(data) == {("c", 1): {"a": 1}, ("c", 2): {"b": 2}, ("d", 4): {}}
    with open(data, "w") as f:
        f.write(json.dumps({"conv_id": "c", "turn": None}) + "\n")
    with pytest.raises(mt.TurnsError, match=r"c.jsonl:1: field turn"):
        mt.load_qrels(data)
