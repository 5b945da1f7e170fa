"""The loss contract of grpo_step: an absent or null field means the documented
default, a present one is taken literally (0 included) and validated."""

import json
from pathlib import Path

import pytest

from lora_trainer import protocol
from lora_trainer.protocol import ProtocolError, parse_loss
from lora_trainer.server import CheckpointStore, TrainerService

from .helpers import tiny_engine

# PROTOCOL.md's LossConfig table, written out independently of loss_defaults().
DOCUMENTED = {
    "type": "grpo",
    "clip_low": 0.2,
    "clip_high": 0.2,  # = clip_low
    "kl_coef": 0.0,
    "mu": 1,
    "max_grad_norm": 1.0,
    "weight_decay": None,  # the endpoint's default
    "max_length": None,  # the longest sample
    "temperature": 1.0,
    "clip_ratio_c": 0.0,
    "kl_estimator": "k3",
    "learning_rate": 0.01,
}


def test_loss_defaults_are_the_go_table():
    """protocol.loss_defaults() is the Go table rlcore.DefaultLoss, as
    rlcore/testdata/loss_defaults.json holds it (the Go test
    TestLossDefaultsFixture keeps that file current)."""
    fixture = Path(__file__).resolve().parents[3] / "rlcore" / "testdata" / "loss_defaults.json"
    assert protocol.loss_defaults() == json.loads(fixture.read_text())


def test_absent_fields_take_the_documented_defaults():
    assert parse_loss({"learning_rate": 0.01}) == DOCUMENTED


def test_null_fields_take_the_documented_defaults():
    body = {k: None for k in DOCUMENTED}
    body["learning_rate"] = 0.01
    assert parse_loss(body) == DOCUMENTED


def test_clip_high_defaults_to_an_explicit_clip_low():
    got = parse_loss({"learning_rate": 0.01, "clip_low": 0.1})
    assert (got["clip_low"], got["clip_high"]) == (0.1, 0.1)
    got = parse_loss({"learning_rate": 0.01, "clip_low": 0.0})
    assert (got["clip_low"], got["clip_high"]) == (0.0, 0.0)


@pytest.mark.parametrize(
    "field,value",
    [
        ("clip_low", 0),
        ("clip_low", 0.0),
        ("clip_high", 0),
        ("kl_coef", 0),
        ("max_grad_norm", 0),
        ("weight_decay", 0),
        ("clip_ratio_c", 0),
        ("clip_high", 0.28),
        ("mu", 3),
        ("max_length", 7),
        ("temperature", 0.7),
        ("kl_estimator", "low_var_kl"),
        ("type", "dr_grpo"),
    ],
)
def test_present_values_are_taken_literally(field, value):
    got = parse_loss({"learning_rate": 0.01, field: value})
    assert got[field] == value
    # JSON 0 really is 0 after a round trip through the wire format.
    assert parse_loss(json.loads(json.dumps({"learning_rate": 0.01, field: value})))[field] == value


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("clip_low", -0.1, "loss.clip_low: must be in [0, 1), got -0.1"),
        ("clip_low", 1.0, "loss.clip_low: must be in [0, 1), got 1.0"),
        ("clip_high", -1, "loss.clip_high: must be >= 0"),
        ("kl_coef", -0.5, "loss.kl_coef: must be >= 0"),
        ("mu", 0, "loss.mu: must be >= 1, got 0"),
        ("mu", 1.5, "loss.mu: want an integer"),
        ("max_length", -1, "loss.max_length: must be >= 0, got -1"),
        ("temperature", 0, "loss.temperature: must be > 0, got 0.0"),
        ("learning_rate", 0, "loss.learning_rate: must be > 0, got 0.0"),
        ("max_grad_norm", -1, "loss.max_grad_norm: must be >= 0"),
        ("weight_decay", -0.1, "loss.weight_decay: must be >= 0"),
        ("clip_ratio_c", 0.5, "loss.clip_ratio_c: must be > 1 (dual-clip PPO) or 0 (none), got 0.5"),
        ("clip_ratio_c", 1, "loss.clip_ratio_c: must be > 1"),
        ("kl_estimator", "k2", "loss.kl_estimator: must be k3 or low_var_kl, got 'k2'"),
        ("kl_estimator", "", "loss.kl_estimator: must be k3 or low_var_kl, got ''"),
        ("clip_low", "0.2", "loss.clip_low: want a finite number, got '0.2'"),
        ("clip_low", True, "loss.clip_low: want a finite number, got True"),
    ],
)
def test_invalid_values_are_refused_naming_the_field(field, value, message):
    with pytest.raises(ProtocolError) as e:
        parse_loss({"learning_rate": 0.01, field: value})
    assert e.value.status == 400 and e.value.code == "invalid_argument"
    assert message in e.value.message


def test_unknown_type_and_missing_learning_rate():
    with pytest.raises(ProtocolError) as e:
        parse_loss({"learning_rate": 0.01, "type": "ppo"})
    assert (e.value.code, e.value.message) == ("unknown_loss_type", "unknown loss type 'ppo'")
    for body in ({}, {"learning_rate": None}):
        with pytest.raises(ProtocolError, match="loss.learning_rate: is required"):
            parse_loss(body)


def test_defaults_live_in_one_function():
    # Every optional field has its default there, and nothing else does.
    assert set(protocol.loss_defaults()) == set(DOCUMENTED) - {"learning_rate"}


def _call(svc, path, body):
    return svc.handle("POST", path, {}, json.dumps(body).encode())


def test_explicit_zero_clip_reaches_the_update(tmp_path):
    """Through the service: clip_low 0 (so clip_high 0) clips every token whose
    ratio is not 1; the default 0.2 clips none at r = e^0.1."""
    prompt = {"text": "what caused it?"}
    ids = [65, 66, 67, 68]

    def clip_fraction(loss_extra):
        svc = TrainerService(tiny_engine(), CheckpointStore(str(tmp_path / "ck")))
        status, lp = _call(svc, "/v1/logprobs", {"items": [{"prompt": prompt, "token_ids": ids}]})
        assert status == 200
        old = [x - 0.1 for x in lp["logprobs"][0]]  # r = e^0.1 = 1.105 on every token
        loss = dict({"type": "grpo", "learning_rate": 1e-6}, **loss_extra)
        body = {"step_id": "s", "loss": loss, "samples": [{"prompt": prompt, "token_ids": ids, "old_logprobs": old, "advantage": 1.0}]}
        status, out = _call(svc, "/v1/grpo_step", body)
        assert status == 200, out
        return out["clip_frac_high"]

    assert clip_fraction({}) == 0.0
    assert clip_fraction({"clip_low": None, "clip_high": None}) == 0.0
    assert clip_fraction({"clip_low": 0}) == 1.0
    assert clip_fraction({"clip_low": 0.2, "clip_high": 0}) == 1.0


def test_invalid_loss_is_a_400_through_the_service(tmp_path):
    svc = TrainerService(tiny_engine(), CheckpointStore(str(tmp_path / "ck")))
    body = {"step_id": "s", "loss": {"type": "grpo", "learning_rate": 0.01, "mu": 0},
            "samples": [{"prompt": {"text": "q"}, "token_ids": [65], "old_logprobs": [-1.0], "advantage": 1.0}]}
    status, out = _call(svc, "/v1/grpo_step", body)
    assert status == 400 and out["error"]["code"] == "invalid_argument" and "loss.mu: must be >= 1" in out["error"]["message"]
    assert svc.engine.policy_version == 0


def test_max_length_zero_is_the_longest_sample():
    # PROTOCOL.md: max_length 0 has a meaning of its own (L_max = the longest
    # sample), the same as an absent field; the Go client always sends it.
    assert parse_loss({"learning_rate": 0.01, "max_length": 0})["max_length"] is None
    assert parse_loss({"learning_rate": 0.01})["max_length"] is None
