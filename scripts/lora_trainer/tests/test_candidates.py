"""Candidate parity with Go: trainer/testdata/candidates.jsonl holds the embedded
policy's ranked candidates of every demo and shared turn (written by
`go test ./trainer -run TestCandidateVectors -update-candidates`); this module
must compute exactly the same lists from the same dialogues."""

import json
import os
import re
from pathlib import Path

import pytest

from lora_trainer import candidates as cand


def repo_root() -> Path:
    d = Path(__file__).resolve().parent
    while not (d / "go.mod").exists():
        if d.parent == d:
            raise RuntimeError("go.mod not found above the tests")
        d = d.parent
    return d


VECTORS = repo_root() / "trainer" / "testdata" / "candidates.jsonl"


def shared_path(rel: str) -> Path:
    """../shared/data/rel; skipped with the reason when missing, a failure under CI=true
    (as internal/testdata does for the Go tests)."""
    p = repo_root().parent / "shared" / "data" / rel
    if not p.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"shared reference data missing under CI=true: {p}")
        pytest.skip(f"shared reference data not found: {p}")
    return p


def load_vectors():
    with open(VECTORS, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def source_dialogues(source: str, memories: str):
    """The dialogue of every line of a source file, by the vector file's rule."""
    if source.startswith("shared:"):
        path = shared_path(source[len("shared:") :])
    else:
        path = repo_root() / source
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            d = {"history": [{"role": m["role"], "content": m["text"]} for m in rec.get("history") or []],
                 "question": rec.get("question") or ""}
            if memories == "ptkb":
                ptkb = (rec.get("meta") or {}).get("ptkb") or {}
                ids = sorted(ptkb, key=lambda k: (0, int(k), "") if k.isdigit() else (1, 0, k))
                d["memories"] = [{"id": k, "text": ptkb[k], "score": 1.0} for k in ids]
            out.append(d)
    return out


def terms(dialogue, cap=96):
    cs, _ = cand.candidates(cand.context_of({"dialogue": dialogue}), cap)
    return [c.term for c in cs]


VECTOR_SOURCES = sorted({v["source"] for v in load_vectors()} - {"inline"})


def test_inline_vectors():
    inline = [v for v in load_vectors() if v["source"] == "inline"]
    assert len(inline) >= 5
    for k, v in enumerate(inline):
        assert terms(v["dialogue"]) == v["candidates"], f"inline vector {k}"


@pytest.mark.parametrize("source", VECTOR_SOURCES)
def test_source_vectors(source):
    vs = [v for v in load_vectors() if v["source"] == source]
    ds = source_dialogues(source, vs[0].get("memories", ""))
    assert len(vs) == len(ds), f"{source}: {len(vs)} vectors, {len(ds)} turns"
    mismatches = []
    for v in vs:
        got = terms(ds[v["line"] - 1])
        if got != v["candidates"]:
            mismatches.append(f"line {v['line']}: python {got[:12]}..., go {v['candidates'][:12]}...")
    assert not mismatches, f"{source}: {len(mismatches)} of {len(vs)} turns differ:\n" + "\n".join(mismatches[:5])


def test_vector_sources_are_the_demo_and_shared_collections():
    # A regenerated file that lost a collection would make the parity partial.
    assert "datasets/demo/train.jsonl" in VECTOR_SOURCES
    for name in ("cast2020", "cast2021", "cast2022", "mtrag_human_eval_subset", "ikat2023_train_memory"):
        assert f"shared:conversations/{name}.jsonl" in VECTOR_SOURCES


def test_stopwords_match_go_source():
    src = (repo_root() / "internal" / "words" / "stopwords.go").read_text(encoding="utf-8")
    lists = dict(re.findall(r"const (\w+) = `([^`]*)`", src))
    assert set(lists["functionWords"].split()) == set(cand.FUNCTION_WORDS.split())
    assert set(lists["dialogueFillers"].split()) == set(cand.DIALOGUE_FILLERS.split())


def test_anaphors_match_go_source():
    src = (repo_root() / "trainer" / "embedded" / "terms.go").read_text(encoding="utf-8")
    block = re.search(r"var anaphors = map\[string\]bool\{(.*?)\n\}", src, re.S).group(1)
    assert set(re.findall(r'"(\w+)": true', block)) == set(cand.ANAPHORS)


def test_cap_is_a_prefix_and_reports_truncation():
    d = {"history": [{"role": "user", "content": "alpha beta gamma"}, {"role": "assistant", "content": "delta epsilon"}],
         "question": "zeta?"}
    full, cut = cand.candidates(cand.context_of({"dialogue": d}))
    assert [c.term for c in full] == ["alpha", "beta", "gamma", "delta", "epsilon"] and not cut
    part, cut = cand.candidates(cand.context_of({"dialogue": d}), 2)
    assert [c.term for c in part] == ["alpha", "beta"] and cut


def test_context_fallbacks():
    msgs = [{"role": "system", "content": "sys words"}, {"role": "user", "content": "Bronze Age"},
            {"role": "assistant", "content": "collapse"}, {"role": "user", "content": "why?"}]
    ctx = cand.context_of({"messages": msgs, "text": "ignored"})
    assert ctx.question == "why?" and [m["content"] for m in ctx.history] == ["Bronze Age", "collapse"]
    assert cand.context_of({"text": "only text"}).question == "only text"


def test_rewrite_text_orders_by_first_occurrence():
    d = {"history": [{"role": "assistant", "content": "Levant drought"}, {"role": "user", "content": "Bronze collapse"}],
         "question": " and then? "}
    cs, _ = cand.candidates(cand.context_of({"dialogue": d}))
    assert [c.term for c in cs] == ["bronze", "collapse", "levant", "drought"]
    assert cand.rewrite_text(" and then? ", [cs[0], cs[3]]) == "and then? drought bronze"


def test_go_lower_is_per_rune():
    assert cand.go_lower("İstanbul") == "istanbul"
    assert cand.go_lower("ΟΔΟΣ") == "οδοσ"  # no final-sigma context rule
    assert cand.tokens("it's 2,000-mile") == ["it", "s", "2", "000", "mile"]
