"""The protocol layer: routing, auth, idempotency, errors, checkpoints, HTTP."""

import http.client
import json
import os
import socket
import threading
import time

import pytest

from lora_trainer.engine import Limits
from lora_trainer.server import CheckpointStore, TrainerService, make_http_server

from .helpers import tiny_engine

PROMPT = {"text": "what caused it?"}


def service(tmp_path, token="", **kw):
    return TrainerService(tiny_engine(**kw), CheckpointStore(str(tmp_path / "ck")), token=token)


def call(svc, path, body=None, method=None, headers=None):
    method = method or ("GET" if body is None else "POST")
    raw = json.dumps(body).encode() if body is not None else b""
    return svc.handle(method, path, headers or {}, raw)


def grpo_body(step_id, advantage=1.0, lr=0.01, old=None):
    return {
        "step_id": step_id,
        "loss": {"type": "grpo", "learning_rate": lr, "kl_coef": 0.05},
        "samples": [{"prompt": PROMPT, "token_ids": [65, 66, 67], "old_logprobs": old or [-5.0, -5.0, -5.0], "advantage": advantage}],
    }


def test_info(tmp_path):
    status, info = call(service(tmp_path, limits=Limits(max_prompts=4)), "/v1/info")
    assert status == 200
    assert info["protocol_version"] == 1 and info["implementation"] == "himes-lora-reference"
    assert info["reference"] == "adapter_disabled" and info["token_kind"] == "tokenizer"
    assert info["loss_types"] == ["grpo", "bnpo", "dapo", "dr_grpo"]
    assert info["adapter"]["type"] == "lora" and info["adapter"]["rank"] == 4
    assert info["capabilities"] == {"top_p": True, "stop": True, "entropy": True, "logprobs": True, "auth": False, "delete": True,
                                    "dual_clip": True, "weight_decay": True, "optimizer_reset": True}
    assert info["kl_estimators"] == ["k3", "low_var_kl"]
    assert info["limits"] == {"max_prompts": 4, "max_n": 128, "max_tokens": 1024, "max_batch": 8192}
    assert info["policy_version"] == 0


def test_bearer_token(tmp_path):
    svc = service(tmp_path, token="s3cret")
    assert call(svc, "/v1/info")[0] == 401
    status, body = call(svc, "/v1/info", headers={"Authorization": "Bearer wrong"})
    assert status == 401 and body["error"]["code"] == "unauthorized" and body["error"]["retryable"] is False
    status, body = call(svc, "/v1/info", headers={"Authorization": "Bearer s3cret"})
    assert status == 200 and body["capabilities"]["auth"] is True


def test_routing_errors(tmp_path):
    svc = service(tmp_path)
    status, body = call(svc, "/v1/nope")
    assert (status, body["error"]["code"]) == (404, "not_found")
    status, body = call(svc, "/v1/sample", method="GET")
    assert (status, body["error"]["code"]) == (405, "invalid_argument")
    status, body = svc.handle("POST", "/v1/sample", {}, b"{not json")
    assert (status, body["error"]["code"]) == (400, "invalid_argument") and "not valid JSON" in body["error"]["message"]
    status, body = svc.handle("POST", "/v1/sample", {}, b"[1]")
    assert status == 400 and "want a JSON object" in body["error"]["message"]


@pytest.mark.parametrize(
    "path,body,code,message",
    [
        ("/v1/sample", {"prompts": []}, "invalid_argument", "prompts: at least one prompt"),
        ("/v1/sample", {"prompts": [PROMPT], "top_p": 1.5}, "invalid_argument", "top_p: must be in (0, 1]"),
        ("/v1/sample", {"prompts": [PROMPT], "n": 2.5}, "invalid_argument", "n: want an integer"),
        ("/v1/sample", {"prompts": [{"messages": [{"role": "bot", "content": "x"}]}]}, "invalid_argument",
         "prompts[0].messages[0].role: want system, user or assistant"),
        ("/v1/sample", {"prompts": [{"text": ""}]}, "invalid_argument", "prompts[0]: empty prompt"),
        ("/v1/sample", {"prompts": [PROMPT] * 5}, "invalid_argument", "prompts: 5 prompts, the limit is 4"),
        ("/v1/grpo_step", dict(grpo_body("x"), loss={"type": "ppo", "learning_rate": 1}), "unknown_loss_type",
         "unknown loss type 'ppo'"),
        ("/v1/grpo_step", grpo_body("x", old=[-1.0, -2.0]), "invalid_argument",
         "samples[0].old_logprobs: length 2, want 3 (len(token_ids))"),
        ("/v1/grpo_step", dict(grpo_body("x"), loss={"type": "grpo"}), "invalid_argument", "loss.learning_rate: is required"),
        ("/v1/grpo_step", dict(grpo_body("x"), loss={"type": "grpo", "learning_rate": 1, "clip_ratio_c": 1.0}), "invalid_argument",
         "loss.clip_ratio_c: must be > 1"),
        ("/v1/grpo_step", dict(grpo_body("x"), loss={"type": "grpo", "learning_rate": 1, "kl_estimator": "k2"}), "invalid_argument",
         "loss.kl_estimator: must be k3 or low_var_kl"),
        ("/v1/grpo_step", dict(grpo_body("x"), loss={"type": "grpo", "learning_rate": 0.1, "weight_decay": -1}), "invalid_argument",
         "loss.weight_decay: must be >= 0"),
        ("/v1/grpo_step", dict(grpo_body("x"), samples=[{"prompt": PROMPT, "token_ids": [999], "old_logprobs": [0]}]),
         "invalid_argument", "samples[0].token_ids[0]: 999 is not a token id in [0, 259)"),
        ("/v1/grpo_step", {k: v for k, v in grpo_body("x").items() if k != "step_id"}, "invalid_argument", "step_id: is required"),
        ("/v1/sft_step", {"step_id": "s", "examples": [{"prompt": PROMPT, "completion": "a"}], "learning_rate": -1},
         "invalid_argument", "learning_rate: is required and must be > 0"),
        ("/v1/save", {"step_id": "s", "name": "../x"}, "invalid_argument", "name: '../x' does not match"),
        ("/v1/load", {"step_id": "s", "name": "missing"}, "not_found", "no checkpoint 'missing'"),
        ("/v1/delete", {"step_id": "s", "name": "../x"}, "invalid_argument", "name: '../x' does not match"),
        ("/v1/delete", {"step_id": "s", "name": ""}, "invalid_argument", "name: is required"),
        ("/v1/delete", {"name": "a"}, "invalid_argument", "step_id: is required"),
    ],
)
def test_request_errors_name_the_field(tmp_path, path, body, code, message):
    svc = TrainerService(tiny_engine(limits=Limits(max_prompts=4)), CheckpointStore(str(tmp_path / "ck")))
    status, resp = call(svc, path, body)
    assert resp["error"]["code"] == code, resp
    assert message in resp["error"]["message"]
    assert status == {"invalid_argument": 400, "unknown_loss_type": 400, "not_found": 404}[code]
    assert svc.engine.policy_version == 0


def test_step_id_replay_and_conflict(tmp_path):
    svc = service(tmp_path)
    status, first = call(svc, "/v1/grpo_step", grpo_body("step-1"))
    assert status == 200 and first["replayed"] is False and first["policy_version"] == 1
    params = [p.detach().clone() for p in svc.engine.params]
    status, again = call(svc, "/v1/grpo_step", grpo_body("step-1"))
    assert status == 200 and again == dict(first, replayed=True)
    assert svc.engine.policy_version == 1
    assert all((a == b).all() for a, b in zip(params, svc.engine.params))
    status, body = call(svc, "/v1/grpo_step", grpo_body("step-1", advantage=-1.0))
    assert (status, body["error"]["code"]) == (409, "conflict")
    status, body = call(svc, "/v1/save", {"step_id": "step-1", "name": "a"})
    assert (status, body["error"]["code"]) == (409, "conflict") and "was used for /v1/grpo_step" in body["error"]["message"]
    # A later call replays with the version it was first applied at.
    call(svc, "/v1/grpo_step", grpo_body("step-2"))
    assert call(svc, "/v1/grpo_step", grpo_body("step-1"))[1]["policy_version"] == 1
    assert svc.engine.policy_version == 2


def test_concurrent_retries_apply_once(tmp_path):
    svc = service(tmp_path)
    results = []
    threads = [threading.Thread(target=lambda: results.append(call(svc, "/v1/grpo_step", grpo_body("same")))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(s == 200 for s, _ in results)
    assert sorted(r["replayed"] for _, r in results) == [False, True, True, True]
    assert svc.engine.policy_version == 1


def test_out_of_memory_is_reported_as_oom_and_not_remembered(tmp_path, monkeypatch):
    svc = service(tmp_path)
    real = svc.engine.grpo_step

    def oom(*a, **k):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(svc.engine, "grpo_step", oom)
    status, body = call(svc, "/v1/grpo_step", grpo_body("big"))
    assert (status, body["error"]["code"], body["error"]["retryable"]) == (507, "oom", False)
    monkeypatch.setattr(svc.engine, "grpo_step", real)
    status, body = call(svc, "/v1/grpo_step", grpo_body("big"))  # the failed call was not remembered
    assert status == 200 and body["replayed"] is False and body["policy_version"] == 1


def test_numeric_failure_is_internal(tmp_path):
    svc = service(tmp_path)
    status, body = call(svc, "/v1/grpo_step", grpo_body("nan", old=[-1e30] * 3))
    assert (status, body["error"]["code"]) == (500, "internal") and "non-finite" in body["error"]["message"]
    assert svc.engine.policy_version == 0


def test_sample_logprobs_sft_roundtrip(tmp_path):
    svc = service(tmp_path)
    status, out = call(svc, "/v1/sample", {"prompts": [PROMPT, {"messages": [{"role": "user", "content": "hi"}]}],
                                           "n": 2, "temperature": 1.0, "max_tokens": 4, "seed": 5})
    assert status == 200 and len(out["samples"]) == 4
    items = [{"prompt": PROMPT if s["prompt_index"] == 0 else {"messages": [{"role": "user", "content": "hi"}]},
              "token_ids": s["token_ids"]} for s in out["samples"]]
    status, lp = call(svc, "/v1/logprobs", {"items": items})
    assert status == 200
    for s, got in zip(out["samples"], lp["logprobs"]):
        assert got == pytest.approx(s["logprobs"], abs=1e-5)
    status, sft = call(svc, "/v1/sft_step", {"step_id": "sft-1", "examples": [{"prompt": PROMPT, "completion": "the cause"}],
                                             "learning_rate": 0.01, "epochs": 2, "max_grad_norm": 1.0})
    assert status == 200 and sft["tokens"] == len("the cause") + 1 and sft["policy_version"] == 1


def test_save_list_load(tmp_path):
    svc = service(tmp_path)
    call(svc, "/v1/grpo_step", grpo_body("g1"))
    status, saved = call(svc, "/v1/save", {"step_id": "s1", "name": "step-1"})
    assert status == 200 and saved["policy_version"] == 1 and saved["size_bytes"] > 0
    lp_saved = call(svc, "/v1/logprobs", {"items": [{"prompt": PROMPT, "token_ids": [65, 66]}]})[1]["logprobs"]
    call(svc, "/v1/grpo_step", grpo_body("g2"))
    status, saved2 = call(svc, "/v1/save", {"step_id": "s2", "name": "step-1"})  # replaces the first
    assert saved2["policy_version"] == 2
    call(svc, "/v1/save", {"step_id": "s3", "name": "a-first"})
    status, lst = call(svc, "/v1/checkpoints")
    assert [c["name"] for c in lst["checkpoints"]] == ["a-first", "step-1"]
    assert lst["checkpoints"][1]["policy_version"] == 2 and lst["checkpoints"][1]["created_at"].endswith("Z")
    assert not [n for n in os.listdir(svc.checkpoints.root) if n.startswith(".")]  # no leftovers
    # Restore version 1 from a fresh save of it.
    svc2 = service(tmp_path / "other")
    call(svc2, "/v1/grpo_step", grpo_body("g1"))
    call(svc2, "/v1/save", {"step_id": "s1", "name": "v1"})
    call(svc2, "/v1/grpo_step", grpo_body("g2"))
    status, loaded = call(svc2, "/v1/load", {"step_id": "l1", "name": "v1"})
    assert status == 200 and loaded == {"name": "v1", "policy_version": 1, "run_id": "", "replayed": False}
    assert call(svc2, "/v1/logprobs", {"items": [{"prompt": PROMPT, "token_ids": [65, 66]}]})[1]["logprobs"] == lp_saved


def lp_of(svc):
    return call(svc, "/v1/logprobs", {"items": [{"prompt": PROMPT, "token_ids": [65, 66]}]})[1]["logprobs"]


def test_delete(tmp_path):
    svc = service(tmp_path)
    call(svc, "/v1/grpo_step", grpo_body("g1"))
    for sid, name in (("s1", "keep"), ("s2", "old")):
        assert call(svc, "/v1/save", {"step_id": sid, "name": name})[0] == 200
    params = [p.detach().clone() for p in svc.engine.params]
    lp = lp_of(svc)

    # An existing checkpoint: deleted, gone from the list and from disk, not loadable.
    status, out = call(svc, "/v1/delete", {"step_id": "d1", "name": "old"})
    assert status == 200 and out == {"name": "old", "deleted": True, "policy_version": 1, "replayed": False}
    assert [c["name"] for c in call(svc, "/v1/checkpoints")[1]["checkpoints"]] == ["keep"]
    assert sorted(os.listdir(svc.checkpoints.root)) == ["keep"]  # no hidden leftovers either
    status, body = call(svc, "/v1/load", {"step_id": "l1", "name": "old"})
    assert (status, body["error"]["code"]) == (404, "not_found")
    # The policy is untouched.
    assert svc.engine.policy_version == 1 and call(svc, "/v1/info")[1]["policy_version"] == 1
    assert all((a == b).all() for a, b in zip(params, svc.engine.params))
    assert lp_of(svc) == lp

    # Replay: the stored answer, nothing applied again.
    status, again = call(svc, "/v1/delete", {"step_id": "d1", "name": "old"})
    assert status == 200 and again == dict(out, replayed=True)
    # A missing checkpoint: idempotent, deleted false, not an error.
    status, missing = call(svc, "/v1/delete", {"step_id": "d2", "name": "old"})
    assert status == 200 and missing == {"name": "old", "deleted": False, "policy_version": 1, "replayed": False}
    status, never = call(svc, "/v1/delete", {"step_id": "d3", "name": "never-saved"})
    assert status == 200 and never["deleted"] is False
    # step_id reuse for another body or another call is a conflict; nothing is deleted.
    status, body = call(svc, "/v1/delete", {"step_id": "d1", "name": "keep"})
    assert (status, body["error"]["code"]) == (409, "conflict")
    status, body = call(svc, "/v1/delete", {"step_id": "s1", "name": "keep"})
    assert (status, body["error"]["code"]) == (409, "conflict") and "was used for /v1/save" in body["error"]["message"]
    assert [c["name"] for c in call(svc, "/v1/checkpoints")[1]["checkpoints"]] == ["keep"]

    # The kept checkpoint still loads; a deleted name can be saved again.
    call(svc, "/v1/grpo_step", grpo_body("g2"))
    status, loaded = call(svc, "/v1/load", {"step_id": "l2", "name": "keep"})
    assert status == 200 and loaded["policy_version"] == 1 and lp_of(svc) == lp
    assert call(svc, "/v1/save", {"step_id": "s3", "name": "old"})[0] == 200
    assert [c["name"] for c in call(svc, "/v1/checkpoints")[1]["checkpoints"]] == ["keep", "old"]


def test_delete_damaged_checkpoint_and_leftovers(tmp_path):
    root = tmp_path / "ck"
    # Leftovers of an interrupted delete and of an interrupted replacement.
    (root / ".del-a-123" / "adapter").mkdir(parents=True)
    (root / ".old-b-456").mkdir()
    svc = TrainerService(tiny_engine(), CheckpointStore(str(root)))
    assert sorted(os.listdir(root)) == []
    # A directory without state.json is never listed, but delete removes it.
    (root / "broken" / "adapter").mkdir(parents=True)
    assert call(svc, "/v1/checkpoints")[1]["checkpoints"] == []
    status, out = call(svc, "/v1/delete", {"step_id": "d", "name": "broken"})
    assert status == 200 and out["deleted"] is True and os.listdir(root) == []


def test_checkpoint_dir_made_by_the_first_save(tmp_path):
    # himes launches the trainer with --checkpoint-dir <run>/trainer before
    # the run directory exists; starting must not create it.
    root = tmp_path / "run" / "trainer"
    svc = TrainerService(tiny_engine(), CheckpointStore(str(root)))
    assert not (tmp_path / "run").exists()
    assert call(svc, "/v1/checkpoints")[1]["checkpoints"] == []
    assert call(svc, "/v1/load", {"step_id": "l", "name": "none"})[0] == 404
    assert not (tmp_path / "run").exists()
    assert call(svc, "/v1/save", {"step_id": "s1", "name": "first"})[0] == 200
    assert [c["name"] for c in call(svc, "/v1/checkpoints")[1]["checkpoints"]] == ["first"]


def test_list_skips_a_checkpoint_deleted_while_listing(tmp_path, monkeypatch):
    svc = service(tmp_path)
    call(svc, "/v1/save", {"step_id": "s1", "name": "real"})
    os.makedirs(svc.checkpoints.path("ghost"))  # seen by listdir, gone (no state.json) by the time it is read
    monkeypatch.setattr(svc.checkpoints, "exists", lambda name: True)
    status, out = call(svc, "/v1/checkpoints")
    assert status == 200 and [c["name"] for c in out["checkpoints"]] == ["real"]


def test_http_server(tmp_path):
    svc = service(tmp_path, token="tok")
    srv = make_http_server(svc, "127.0.0.1", 0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=60)
        conn.request("GET", "/v1/info", headers={"Authorization": "Bearer tok"})
        r = conn.getresponse()
        assert r.status == 200 and r.getheader("Content-Type") == "application/json; charset=utf-8"
        assert json.loads(r.read())["protocol_version"] == 1
        # keep-alive: a second request on the same connection
        body = json.dumps({"prompts": [PROMPT], "max_tokens": 2})
        conn.request("POST", "/v1/sample", body=body, headers={"Authorization": "Bearer tok", "Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 200 and len(json.loads(r.read())["samples"]) == 1
        conn.close()
        # An oversized body is refused from its Content-Length alone.
        conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=60)
        conn.putrequest("POST", "/v1/sample")
        conn.putheader("Authorization", "Bearer tok")
        conn.putheader("Content-Length", str(65 << 20))
        conn.endheaders()
        r = conn.getresponse()
        assert r.status == 413 and json.loads(r.read())["error"]["code"] == "invalid_argument"
        conn.close()
    finally:
        srv.shutdown()
        srv.server_close()


# --- #14: version precondition, run ids, checksums, limits, timeouts


def test_version_precondition(tmp_path):
    svc = service(tmp_path)
    mismatch = "expected_policy_version 72, but the policy is at version 1"
    assert call(svc, "/v1/grpo_step", dict(grpo_body("g1"), expected_policy_version=0))[1]["policy_version"] == 1
    # A retry of the applied call replays, although the version has moved.
    status, again = call(svc, "/v1/grpo_step", dict(grpo_body("g1"), expected_policy_version=0))
    assert status == 200 and again["replayed"] is True and again["policy_version"] == 1
    params = [p.detach().clone() for p in svc.engine.params]
    for path, body in [
        ("/v1/sample", {"prompts": [PROMPT], "max_tokens": 2, "expected_policy_version": 72}),
        ("/v1/grpo_step", dict(grpo_body("g2"), expected_policy_version=72)),
        ("/v1/sft_step", {"step_id": "s", "examples": [{"prompt": PROMPT, "completion": "a"}], "learning_rate": 0.1,
                          "expected_policy_version": 72}),
        ("/v1/save", {"step_id": "v", "name": "stale", "expected_policy_version": 72}),
    ]:
        status, resp = call(svc, path, body)
        assert (status, resp["error"]["code"], resp["error"]["retryable"]) == (412, "version_mismatch", False), (path, resp)
        assert mismatch in resp["error"]["message"]
    assert svc.engine.policy_version == 1
    assert all((a == b).all() for a, b in zip(params, svc.engine.params))
    assert call(svc, "/v1/checkpoints")[1]["checkpoints"] == []
    # The refused call was not remembered: at the right version it applies.
    status, out = call(svc, "/v1/grpo_step", dict(grpo_body("g2"), expected_policy_version=1))
    assert status == 200 and out["replayed"] is False and out["policy_version"] == 2
    status, resp = call(svc, "/v1/sample", {"prompts": [PROMPT], "expected_policy_version": -1})
    assert (status, resp["error"]["code"]) == (400, "invalid_argument")


def test_run_id_and_shared_checkpoint_dir(tmp_path):
    # Two servers (two runs' trainers) share one checkpoint directory.
    a = TrainerService(tiny_engine(), CheckpointStore(str(tmp_path / "ck")))
    b = TrainerService(tiny_engine(), CheckpointStore(str(tmp_path / "ck")))
    call(a, "/v1/grpo_step", grpo_body("g1"))
    assert call(a, "/v1/save", {"step_id": "s", "name": "run-a-step-000001", "run_id": "aaaa"})[0] == 200
    assert [(c["name"], c["run_id"]) for c in call(b, "/v1/checkpoints")[1]["checkpoints"]] == [("run-a-step-000001", "aaaa")]
    lp = lp_of(b)
    status, resp = call(b, "/v1/load", {"step_id": "l", "name": "run-a-step-000001", "expected_run_id": "bbbb"})
    assert (status, resp["error"]["code"]) == (412, "run_mismatch")
    assert "saved by run 'aaaa', not 'bbbb'" in resp["error"]["message"]
    assert b.engine.policy_version == 0 and lp_of(b) == lp
    status, loaded = call(b, "/v1/load", {"step_id": "l2", "name": "run-a-step-000001", "expected_run_id": "aaaa"})
    assert status == 200 and loaded == {"name": "run-a-step-000001", "policy_version": 1, "run_id": "aaaa", "replayed": False}
    assert lp_of(b) == lp_of(a)


def _edit_json(path, edit):
    with open(path, encoding="utf-8") as f:
        meta = json.load(f)
    edit(meta)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f)


def test_corrupt_checkpoint_is_refused(tmp_path):
    svc = service(tmp_path)
    call(svc, "/v1/grpo_step", grpo_body("g1"))
    call(svc, "/v1/save", {"step_id": "s", "name": "ck", "run_id": "r"})
    root = svc.checkpoints.path("ck")
    meta = json.load(open(os.path.join(root, "state.json"), encoding="utf-8"))
    assert meta["checksum"].startswith("sha256:") and meta["run_id"] == "r"
    assert "optimizer.pt" in meta["files"] and any(k.startswith("adapter/") for k in meta["files"])
    call(svc, "/v1/grpo_step", grpo_body("g2"))
    lp = lp_of(svc)
    # An edited version in otherwise valid metadata.
    _edit_json(os.path.join(root, "state.json"), lambda m: m.update(policy_version=40))
    status, resp = call(svc, "/v1/load", {"step_id": "l1", "name": "ck"})
    assert (status, resp["error"]["code"]) == (500, "checkpoint_corrupt") and "state.json does not match its checksum" in resp["error"]["message"]
    _edit_json(os.path.join(root, "state.json"), lambda m: m.update(policy_version=1))
    # A flipped byte in the adapter weights.
    adapter = sorted(k for k in meta["files"] if k.startswith("adapter/"))[0]
    with open(os.path.join(root, adapter), "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    status, resp = call(svc, "/v1/load", {"step_id": "l2", "name": "ck"})
    assert (status, resp["error"]["code"]) == (500, "checkpoint_corrupt") and f"{adapter} does not match its checksum" in resp["error"]["message"]
    assert svc.engine.policy_version == 2 and lp_of(svc) == lp


def test_limits_refuse_huge_requests(tmp_path):
    svc = service(tmp_path)
    t0 = time.process_time()
    status, resp = call(svc, "/v1/sample", {"prompts": [PROMPT], "n": 10_000_000, "temperature": 1})
    assert (status, resp["error"]["code"]) == (400, "invalid_argument")
    assert resp["error"]["message"] == "n: 10000000 samples per prompt, the limit is 128 (info.limits)"
    assert time.process_time() - t0 < 5  # refused from the field, nothing generated
    cases = [
        ("/v1/sample", {"prompts": [PROMPT] * 1025}, "prompts: 1025 prompts, the limit is 1024"),
        ("/v1/sample", {"prompts": [PROMPT], "max_tokens": 1025}, "max_tokens: 1025 tokens, the limit is 1024"),
        ("/v1/logprobs", {"items": [{"prompt": PROMPT, "token_ids": []}] * 8193}, "items: 8193 items, the limit is 8192"),
        ("/v1/grpo_step", dict(grpo_body("g"), samples=grpo_body("g")["samples"] * 8193), "samples: 8193 samples, the limit is 8192"),
    ]
    for path, body, message in cases:
        status, resp = call(svc, path, body)
        assert (status, resp["error"]["code"]) == (400, "invalid_argument") and message in resp["error"]["message"], (path, resp)
    assert svc.engine.policy_version == 0


def test_cpu_allocation_failure_is_oom(tmp_path, monkeypatch):
    svc = service(tmp_path)

    def cpu_oom(*a, **k):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: not enough memory: "
                           "you tried to allocate 40000000000 bytes.")

    monkeypatch.setattr(svc.engine, "sample", cpu_oom)
    status, resp = call(svc, "/v1/sample", {"prompts": [PROMPT]})
    assert (status, resp["error"]["code"], resp["error"]["retryable"]) == (507, "oom", False)
    monkeypatch.setattr(svc.engine, "sample", lambda *a, **k: (_ for _ in ()).throw(MemoryError()))
    assert call(svc, "/v1/sample", {"prompts": [PROMPT]})[1]["error"]["code"] == "oom"


def _serve(svc, read_timeout):
    srv = make_http_server(svc, "127.0.0.1", 0, read_timeout=read_timeout)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _read_all(sock):
    out = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return out
        out += chunk


def test_http_unauthenticated_body_refused_before_reading(tmp_path):
    srv = _serve(service(tmp_path, token="tok"), read_timeout=60)
    try:
        # 32 MiB announced, not a byte sent: a server that read the body
        # first would wait for it (the client's 30 s timeout then fails the test).
        with socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=30) as s:
            s.sendall(b"POST /v1/sample HTTP/1.1\r\nHost: x\r\nContent-Length: 33554432\r\n\r\n")
            got = _read_all(s)
        assert got.startswith(b"HTTP/1.1 401") and b'"unauthorized"' in got
    finally:
        srv.shutdown()
        srv.server_close()


def test_http_slow_clients_are_disconnected(tmp_path):
    srv = _serve(service(tmp_path), read_timeout=0.2)
    port = srv.server_address[1]
    try:
        # Headers trickled a byte at a time, each within the socket timeout:
        # the headers' own deadline closes the connection.
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            head = b"GET /v1/info HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 400
            closed = False
            for i in range(len(head)):
                try:
                    s.sendall(head[i:i + 1])
                except OSError:
                    closed = True
                    break
                time.sleep(0.05)
                s.setblocking(False)
                try:
                    if s.recv(1) == b"":
                        closed = True
                        break
                except BlockingIOError:
                    pass
                finally:
                    s.setblocking(True)
            assert closed, "the server kept a connection whose headers never completed"
        # A body that stops half way: 408, then the connection is closed.
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"POST /v1/sample HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompts\"")
            got = _read_all(s)
        assert got.startswith(b"HTTP/1.1 408"), got
    finally:
        srv.shutdown()
        srv.server_close()
