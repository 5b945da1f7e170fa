"""scripts/memory_llm_judge.py without SmolLM2: the chance MRR@3 against
enumerated permutations, the per-turn standardization and fusion, the
selection's tie-break, the prompt's contents, and the judge's scores on a
random-weight llama being the same whatever the batch (right padding read at
each row's last real token)."""

import itertools
import math

import pytest

from .conftest import load_script


@pytest.fixture(scope="module")
def judge_mod():
    return load_script("memory_llm_judge")


def brute_chance(n: int, r: int) -> float:
    items = ["r"] * r + ["x"] * (n - r)
    total = count = 0
    for perm in itertools.permutations(range(n)):
        order = [items[i] for i in perm]
        total += next((1 / (k + 1) for k, it in enumerate(order[:3]) if it == "r"), 0.0)
        count += 1
    return total / count


@pytest.mark.parametrize("n,r", [(1, 1), (2, 1), (3, 1), (4, 1), (5, 2), (6, 3), (3, 3), (7, 1)])
def test_chance_mrr_matches_enumeration(judge_mod, n, r):
    assert judge_mod.chance_mrr(n, r) == pytest.approx(brute_chance(n, r), abs=1e-12)


def test_chance_mrr_by_hand(judge_mod):
    assert judge_mod.chance_mrr(4, 1) == pytest.approx(1 / 4 + 1 / 8 + 1 / 12)
    assert judge_mod.chance_mrr(3, 0) == 0.0


def test_standardize_and_fusion(judge_mod):
    z = judge_mod.standardize([1.0, 2.0, 3.0])
    assert z == pytest.approx([-math.sqrt(1.5), 0.0, math.sqrt(1.5)])
    assert judge_mod.standardize([2.0, 2.0]) == [0.0, 0.0]  # a constant score adds nothing
    S = judge_mod.Setting
    cos, llm = [0.1, 0.3, 0.2], {"question": [5.0, -5.0, 0.0]}
    assert judge_mod.ranked_scores(S("minilm"), cos, llm) == cos
    assert judge_mod.ranked_scores(S("llm", "question"), cos, llm) == llm["question"]
    fused = judge_mod.ranked_scores(S("fused", "question", 1.0), cos, llm)
    # z(cos) = [-1.2247, 1.2247, 0], z(llm) = [1.2247, -1.2247, 0]: equal weights cancel
    assert fused == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)


def test_simplicity_orders_the_ties(judge_mod):
    names = [s.name for s in sorted(judge_mod.settings(), key=lambda s: s.simplicity())]
    assert names[0] == "MiniLM alone"
    assert names[1] == "MiniLM + 0.25 x LLM, question prompt"
    assert names[-1] == "LLM alone, history prompt"
    assert len(set(names)) == len(names) == 1 + 2 * (1 + len(judge_mod.WEIGHTS))


def test_prompt_shows_history_only_in_its_variant(judge_mod):
    hist = [{"role": "user", "text": "u1"}, {"role": "assistant", "text": "a" * 1000}, {"role": "user", "text": "u2"}]
    q = judge_mod.user_message("question", "I live in the Netherlands.", "Which one is closest to me?", hist)
    assert "I live in the Netherlands." in q and "Which one is closest to me?" in q and "u2" not in q
    h = judge_mod.user_message("history", "I live in the Netherlands.", "Which one is closest to me?", hist)
    assert "u1" not in h  # only the last exchange
    assert "Assistant: " + "a" * judge_mod.CONTEXT_CHARS + "\n" in h and "a" * (judge_mod.CONTEXT_CHARS + 1) not in h
    assert h.index("User: u2") > h.index("Assistant: ")


def test_judge_scores_do_not_depend_on_the_batch(judge_mod, llama_dir):
    msgs = ["short", "a much longer message that pads the others in its batch " * 3, "mid length one"]
    one = judge_mod.Judge(llama_dir, batch=1, yes="Y", no="N").scores(msgs)
    many = judge_mod.Judge(llama_dir, batch=8, yes="Y", no="N").scores(msgs)
    assert one == pytest.approx(many, abs=1e-4)
    assert len(set(round(x, 6) for x in one)) == 3  # the prompts differ, and so do their scores


def test_judge_refuses_a_word_of_several_tokens(judge_mod, llama_dir):
    with pytest.raises(judge_mod.mf.InputError, match="tokens, want 1"):
        judge_mod.Judge(llama_dir, yes="Yes", no="N")
