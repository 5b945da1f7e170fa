"""The protocol layer: routing, auth, idempotency, errors, checkpoints, HTTP."""

import http.client
import json
import os
import threading

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
                                    "weight_decay": True}
    assert info["limits"] == {"max_prompts": 4, "max_n": 0, "max_tokens": 0, "max_batch": 0}
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
    assert status == 200 and loaded == {"name": "v1", "policy_version": 1, "replayed": False}
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
