"""scripts/memory_finetune.py without training: its MRR@3 against hand-computed
values, its ranking rule, its bootstrap's percentile, its input errors, and its
topic halves against docs/EMBEDDINGS.md's (A = topics 1, 3, 5, 7: 56 turns, 23
labelled; B = topics 2, 4, 6, 8: 39 turns, 19 labelled) on the shared iKAT file,
which is skipped with the reason when ../shared is missing (a failure under CI=true)."""

import json
import math
import os

import pytest

from .conftest import ROOT, load_script, need

IKAT = os.path.join(os.path.dirname(ROOT), "shared", "data", "conversations", "ikat2023_train_memory.jsonl")


@pytest.fixture(scope="module")
def mf():
    return load_script("memory_finetune")


def test_mrr_at_3_by_hand(mf):
    assert mf.mrr_at_k(["a", "b", "c", "d"], {"a"}) == 1.0
    assert mf.mrr_at_k(["a", "b", "c", "d"], {"b"}) == 0.5
    assert mf.mrr_at_k(["a", "b", "c", "d"], {"c", "b"}) == 0.5  # the first relevant one counts
    assert mf.mrr_at_k(["a", "b", "c", "d"], {"c"}) == pytest.approx(1 / 3)
    assert mf.mrr_at_k(["a", "b", "c", "d"], {"d"}) == 0.0  # rank 4 is outside the top 3
    assert mf.mrr_at_k(["a", "b"], {"z"}) == 0.0
    assert math.isnan(mf.mrr_at_k(["a", "b", "c"], set()))  # an unlabelled turn is not averaged
    # the mean over three turns: (1 + 1/2 + 0) / 3
    vals = [mf.mrr_at_k(r, rel) for r, rel in ((["1", "2"], {"1"}), (["1", "2"], {"2"}), (["1", "2", "3", "4"], {"4"}))]
    assert mf.mean(vals) == pytest.approx(0.5)


def test_ranking_by_score_then_id_without_the_question_itself(mf):
    ids, texts = ["1", "2", "3", "4"], ["I live in the Netherlands.", "I like Indian food.", "Which one is closest?", "I am 26."]
    # 3 repeats the question (case and spacing aside): left out, as memory.Store.activate does
    assert mf.rank_ids("which  one is CLOSEST?", ids, texts, [0.2, 0.5, 0.9, 0.2]) == ["2", "1", "4"]
    assert mf.mrr_at_k(mf.rank_ids("closest to me?", ids, texts, [0.1, 0.3, 0.2, 0.4]), {"1"}) == 0.0
    assert mf.mrr_at_k(mf.rank_ids("closest to me?", ids, texts, [0.3, 0.1, 0.2, 0.4]), {"1"}) == 0.5


def test_bootstrap_percentile_and_paired(mf):
    assert mf._quantile([0.0, 1.0, 2.0, 3.0], 0.5) == 1.5
    assert mf._quantile([0.0, 1.0, 2.0, 3.0], 0.025) == pytest.approx(0.075)
    # the mean is over turns, not conversations: (1 + 0 + 0) / 3
    e = mf.bootstrap([[1.0], [0.0, 0.0]], resamples=200)
    assert e["mean"] == pytest.approx(1 / 3) and e["turns"] == 3 and e["conversations"] == 2
    assert 0.0 <= e["ci_lo"] <= e["mean"] <= e["ci_hi"] <= 1.0
    same = mf.paired([[0.5, 1.0], [0.0]], [[0.5, 1.0], [0.0]], resamples=200)
    assert same["diff"] == 0.0 and same["p_value"] == 1.0


def write(tmp_path, recs):
    p = tmp_path / "in.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(p)


GOOD = {"conv_id": "ikat2023-1-1", "turn": 1, "question": "Which one is closest to me?",
        "meta": {"ptkb": {"1": "I live in the Netherlands.", "2": "I like Indian food."}, "ptkb_provenance": [1]}}


@pytest.mark.parametrize("bad, field", [
    ({"conv_id": "cast-1"}, "field conv_id"),
    ({"conv_id": "ikat2023-9-1"}, "topic 9 is in neither half"),
    ({"turn": "1"}, "field turn"),
    ({"question": ""}, "field question"),
    ({"meta": {"ptkb": {}, "ptkb_provenance": []}}, "field meta.ptkb"),
    ({"meta": {"ptkb": {"1": "x"}, "ptkb_provenance": [7]}}, "field meta.ptkb_provenance[0]: id 7 is not in meta.ptkb"),
    ({"meta": {"ptkb": {"1": "x"}, "ptkb_provenance": "1"}}, "field meta.ptkb_provenance"),
])
def test_bad_input_names_file_line_and_field(mf, tmp_path, bad, field):
    path = write(tmp_path, [GOOD, {**GOOD, **bad}])
    with pytest.raises(mf.InputError) as e:
        mf.load_turns(path)
    assert str(e.value).startswith(f"{path}:2: ") and field in str(e.value)


def test_good_input(mf, tmp_path):
    (t,) = mf.load_turns(write(tmp_path, [GOOD]))
    assert (t.topic, t.ids, t.relevant, t.line) == (1, ("1", "2"), frozenset({"1"}), 1)
    assert mf.half_of(1) == "A" and mf.half_of(2) == "B"


def test_halves_are_the_docs(mf):
    need(os.path.exists(IKAT), f"shared iKAT memory file not found: {IKAT}")
    assert mf.HALVES == {"A": (1, 3, 5, 7), "B": (2, 4, 6, 8)}
    turns = mf.load_turns(IKAT)
    for h, (n, n_lab) in {"A": (56, 23), "B": (39, 19)}.items():
        mine = [t for t in turns if mf.half_of(t.topic) == h]
        assert (len(mine), len(mf.labelled(mine))) == (n, n_lab), h
    # the two conversations of a topic stay together, and the nested folds split a half by topic pairs
    assert {t.conv_id for t in turns if mf.half_of(t.topic) == "A"} == {
        "ikat2023-1-1", "ikat2023-1-2", "ikat2023-3-1", "ikat2023-3-2", "ikat2023-5-1", "ikat2023-7-1"}
    assert mf.inner_folds([t for t in turns if mf.half_of(t.topic) == "A"]) == [(1, 3), (5, 7)]
    assert mf.inner_folds([t for t in turns if mf.half_of(t.topic) == "B"]) == [(2, 4), (6, 8)]
