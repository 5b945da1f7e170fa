"""The trained adapter, served by a real Ollama (issue 24, item 4).

This is the `--format adapter` path (Ollama converts the PEFT adapter); the
default merged GGUF is test_served_equals_trained.py's.

A LoRA is trained on a tiny random-weight Llama (chatml_model.py) by `himes
train` against the hf backend's server (SFT on a few human rewrites, then
GRPO steps), exported with `himes export ollama`, loaded with `ollama create`
from that Modelfile (FROM the model's safetensors directory, ADAPTER the PEFT
directory) by a private Ollama v0.6.5 server, and evaluated with `himes eval
--rewriter policy,ollama:tiny-rw,ollama:tiny-base`. The greedy rewrites of the
trainer (policy) and of Ollama (tiny-rw) are compared turn by turn; the base
model without the adapter must answer differently, or the comparison could
not tell a served adapter from an ignored one.

Where they may differ, and why: Ollama computes in float16 where the trainer
computes in float32 (ollama create stores the weights and the adapter as F16,
llama.cpp converts activations to F16 for the matrix products and keeps the
KV cache in F16). The model's weights are float16 values already, so the
conversion itself is exact (checked: transformers reading Ollama's converted
file back gives the trainer's logits bit for bit); the arithmetic is not. A
greedy choice whose top two logits are closer than that error can flip and
the texts part from there. The trained adapter makes the learned rewrites
confident, so the test asks for equality on every turn and, if one differs,
reports the turn and both texts.

Skips without the Python environment or the ollama binary (scripts/ci/
setup-python.sh, setup-ollama.sh); fails instead under CI=true.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from .conftest import ROOT, need

# The projections Ollama v0.6.5 converts faithfully on a llama base: it
# mis-converts q_proj and k_proj adapters (see cmd/himes/export.go; measured:
# with them the served rewrites differed from the first token on every turn),
# which `himes export ollama` therefore refuses
# (TestExportOllamaRefusesWhatOllamaMisconverts).
OLLAMA_TARGETS = "v_proj,o_proj,gate_proj,up_proj,down_proj"

# Turns of datasets/demo/train.jsonl the adapter is trained and compared on.
TURNS = 6


def ollama_binary() -> str:
    """$HIMES_OLLAMA_BIN, then PATH, then $(go env GOPATH)/bin/ollama (where setup-ollama.sh installs it)."""
    path = os.environ.get("HIMES_OLLAMA_BIN", "")
    if path:
        need(os.access(path, os.X_OK), f"HIMES_OLLAMA_BIN={path} is not an executable")
        return path
    path = shutil.which("ollama") or ""
    if not path and shutil.which("go"):
        gopath = subprocess.run(["go", "env", "GOPATH"], capture_output=True, text=True).stdout.strip()
        for d in gopath.split(os.pathsep):
            if d and os.access(os.path.join(d, "bin", "ollama"), os.X_OK):
                path = os.path.join(d, "bin", "ollama")
                break
    need(bool(path), "no ollama binary ($HIMES_OLLAMA_BIN, PATH, $(go env GOPATH)/bin): run scripts/ci/setup-ollama.sh")
    return path


class Ollama:
    """A private `ollama serve` on a free loopback port with its own model directory."""

    def __init__(self, binary: str, workdir: str):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.binary = binary
        self.host = f"127.0.0.1:{port}"
        self.url = f"http://{self.host}"
        self.env = dict(os.environ, OLLAMA_HOST=self.host, OLLAMA_MODELS=os.path.join(workdir, "models"),
                        HOME=os.path.join(workdir, "home"), OLLAMA_NOPRUNE="1", OLLAMA_KEEP_ALIVE="10m")
        os.makedirs(self.env["HOME"], exist_ok=True)
        self.log = open(os.path.join(workdir, "ollama.log"), "w+")
        # Its own session: stop() ends the model runner it starts as well.
        self.proc = subprocess.Popen([binary, "serve"], env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        for _ in range(1200):
            try:
                urllib.request.urlopen(self.url + "/", timeout=5).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        self.stop()
        raise AssertionError(f"ollama serve did not come up on {self.host}:\n{self.server_log()}")

    def create(self, name: str, modelfile: str) -> str:
        p = subprocess.run([self.binary, "create", name, "-f", modelfile], env=self.env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, f"ollama create {name}: {p.stdout}\n{p.stderr}\nserver log:\n{self.server_log()}"
        return p.stdout + p.stderr

    def server_log(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


@pytest.fixture
def ollama(tmp_path):
    server = Ollama(ollama_binary(), str(tmp_path / "ollama"))
    yield server
    server.stop()


def run(argv, what: str, timeout: int = 1800):
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{what} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
    return p


def write_config(path: str, data: str, kb: str, endpoint: str, out_dir: str):
    # SFT until the few rewrites are learned (their greedy choices then have
    # wide margins), then a few small GRPO steps: the adapter Ollama serves is
    # the one GRPO last updated.
    cfg = f"""
run: {{name: tiny-ollama, output_dir: {out_dir}, seed: 1}}
data:
  train: {data}
  eval_fraction: 0   # no held-out split: the served rewrites are compared on the trained turns (eval --data)
  kb: {kb}
  user_field: conv_id
  prompt: {{max_turns: 2, max_message_chars: 200, max_chars: 400}}
retrieval: {{method: bm25, top_k: 3, candidates: 20}}
rollout: {{responder: extractive}}
reward: {{alpha: 1, beta: 1, tokenizer: unicode, hit: gold}}
grpo:
  steps: 2
  prompts_per_step: 2
  group_size: 4
  temperature: 1.0
  max_tokens: 32
  learning_rate: 1.0e-3
  loss: {{type: grpo, kl_coef: 0.0}}
  sft: {{epochs: 40, batch_size: {TURNS}, learning_rate: 2.0e-2}}
  eval_every: 0
  checkpoint_every: 2
trainer: {{endpoint: {endpoint}, timeout_seconds: 600}}
"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(cfg)


def read_rewrites(turns_parquet: str):
    """{rewriter: {(conv_id, turn): rewrite}} from himes eval's turns.parquet; failed turns fail the test."""
    import pyarrow.parquet as pq

    rows = pq.read_table(turns_parquet).to_pylist()
    out = {}
    for r in rows:
        assert not r["error"], f"{r['rewriter']} failed on {r['conv_id']}#{r['turn']}: {r['error_stage']}: {r['error']}"
        out.setdefault(r["rewriter"], {})[(r["conv_id"], r["turn"])] = r["rewrite"]
    return out


def test_trained_adapter_served_by_ollama_rewrites_as_the_trainer(tmp_path, himes_bin, serve, ollama):
    from .chatml_model import build_model

    model_dir = build_model(str(tmp_path / "tiny-llama"))
    with open(os.path.join(ROOT, "datasets", "demo", "train.jsonl"), encoding="utf-8") as f:
        lines = [line for line in f if line.strip()][:TURNS]
    data = str(tmp_path / "turns.jsonl")
    with open(data, "w", encoding="utf-8") as f:
        f.writelines(lines)

    ckpt = str(tmp_path / "trainer-checkpoints")
    trainer = serve(["--backend", "hf", "--base-model", model_dir, "--lora-rank", "8", "--lora-alpha", "16",
                     "--lora-target-modules", OLLAMA_TARGETS, "--seed", "1"], checkpoint_dir=ckpt)
    cfg = str(tmp_path / "run.yaml")
    runs = str(tmp_path / "runs")
    write_config(cfg, data, os.path.join(ROOT, "datasets", "demo", "passages.jsonl"), trainer.url, runs)
    run([himes_bin, "train", "--config", cfg], "himes train")
    run_dir = os.path.join(runs, "tiny-ollama")

    export = str(tmp_path / "export")
    run([himes_bin, "export", "ollama", "--run", run_dir, "--checkpoint", "latest", "--checkpoint-dir", ckpt,
         "--base", model_dir, "--out", export, "--name", "tiny-rw", "--param", "num_thread=1", "--format", "adapter"],
        "himes export ollama")
    modelfile = os.path.join(export, "Modelfile")
    out = ollama.create("tiny-rw", modelfile)
    # Ollama must have recognized the chat template (else it would send the raw prompt text).
    assert "using autodetected template chatml" in out, out
    base_mf = str(tmp_path / "Modelfile.base")
    with open(base_mf, "w", encoding="utf-8") as f:
        f.write(f"FROM {model_dir}\nPARAMETER num_thread 1\n")
    ollama.create("tiny-base", base_mf)

    ev = str(tmp_path / "eval")
    run([himes_bin, "eval", "--config", cfg, "--rewriter", "policy,ollama:tiny-rw,ollama:tiny-base", "--data", data,
         "--ollama-host", ollama.url, "--out", ev, "--resamples", "40"], "himes eval")
    rw = read_rewrites(os.path.join(ev, "turns.parquet"))
    policy, served, base = rw["policy"], rw["ollama:tiny-rw"], rw["ollama:tiny-base"]
    assert set(policy) == set(served) == set(base) and len(policy) == TURNS, (sorted(policy), sorted(served))

    # The adapter matters: without it the model says something else.
    assert any(base[k] != served[k] for k in served), "the adapter changed no rewrite; the comparison would prove nothing"
    # The trainer's greedy rewrites are real text (learned), not empty.
    assert all(policy[k].strip() for k in policy), policy
    differ = {k: (policy[k], served[k]) for k in policy if policy[k] != served[k]}
    report = json.dumps({f"{k[0]}#{k[1]}": {"trainer": a, "ollama": b} for k, (a, b) in differ.items()}, indent=1)
    assert not differ, f"{len(differ)} of {len(policy)} greedy rewrites differ between the trainer and Ollama:\n{report}"
