"""Flags: defaults that depend on the backend, and errors for bad values."""

import pytest

import os

import torch

from lora_trainer.cli import build_engine, cpu_threads, parse_args, resolve_token


def test_backend_dependent_defaults():
    assert parse_args(["--backend", "tiny"]).max_prompt_tokens == 1024
    assert parse_args(["--backend", "hf", "--base-model", "m"]).max_prompt_tokens == 0
    assert parse_args(["--backend", "tiny", "--max-prompt-tokens", "0"]).max_prompt_tokens == 0
    a = parse_args(["--backend", "tiny"])
    assert (a.host, a.lora_dropout, a.micro_batch_size) == ("127.0.0.1", 0.0, 0)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--backend", "hf"], "--backend hf needs --base-model"),
        (["--backend", "tiny", "--lora-rank", "0"], "--lora-rank: must be >= 1"),
        (["--backend", "tiny", "--lora-dropout", "1.5"], "--lora-dropout: must be in [0, 1)"),
        (["--backend", "tiny", "--micro-batch-size", "-1"], "--micro-batch-size: must be >= 0"),
        (["--backend", "tiny", "--threads", "-1"], "--threads: must be >= 0"),
        (["--backend", "tiny", "--lora-rank", "-3"], "--lora-rank: must be >= 1"),
        (["--backend", "tiny", "--lora-alpha", "-1"], "--lora-alpha: must be a finite number > 0, got -1.0"),
        (["--backend", "tiny", "--lora-alpha", "nan"], "--lora-alpha: must be a finite number > 0, got nan"),
        (["--backend", "tiny", "--weight-decay", "-1"], "--weight-decay: must be a finite number >= 0, got -1.0"),
        (["--backend", "tiny", "--tiny-layers", "0"], "--tiny-layers: must be >= 1"),
        (["--backend", "tiny", "--tiny-d-model", "0"], "--tiny-d-model: must be >= 1"),
        (["--backend", "tiny", "--vllm-gpu-memory-utilization", "0"], "--vllm-gpu-memory-utilization: must be in (0, 1]"),
    ],
)
def test_bad_flags(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err


def test_token_from_the_environment(monkeypatch):
    monkeypatch.setenv("LT_TOKEN", "abc")
    assert resolve_token("$LT_TOKEN") == "abc"
    assert resolve_token("plain") == "plain"
    monkeypatch.delenv("LT_TOKEN")
    with pytest.raises(SystemExit, match="LT_TOKEN is empty or unset"):
        resolve_token("$LT_TOKEN")


def test_build_tiny_engine_with_target_modules():
    e = build_engine(parse_args(["--backend", "tiny", "--device", "cpu", "--lora-target-modules", "q_proj,v_proj",
                                 "--tiny-d-model", "32", "--tiny-layers", "1", "--limit-n", "4"]))
    assert e.backend.adapter_info()["target_modules"] == ["q_proj", "v_proj"]
    assert len(e.params) == 4  # A and B of two layers in one block
    assert e.limits.max_n == 4
    with pytest.raises(ValueError, match="tiny backend has no module"):
        build_engine(parse_args(["--backend", "tiny", "--device", "cpu", "--lora-target-modules", "gate_proj"]))


def test_threads_default_to_every_allowed_core():
    want = len(os.sched_getaffinity(0))
    assert cpu_threads(0) == want
    assert cpu_threads(3) == 3
    before = torch.get_num_threads()
    try:
        build_engine(parse_args(["--backend", "tiny", "--device", "cpu", "--tiny-d-model", "32", "--tiny-layers", "1",
                                 "--threads", "2"]))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
