"""The data-parallel trainer on the CPU (gloo), 2 processes against 1.

The ranks are started as torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT in the environment), and once through torchrun
itself. The same requests must give the same update as one process. In float64
(--dtype float64) that is exact but for the order of a few sums: losses, gradient
norms, KL and entropy within 1e-9 relative, and each parameter tensor's delta
(read from the saved adapters) within 1e-9 relative in norm (measured: 4e-14 at
most); a shard dropped, a gradient not summed or a wrong normalization would be
off by far more. In float32, the dtype a CPU run trains in, the sums' order
rounds: the tiny Llama's gradients and deltas within 1e-5 relative (issue 36's
target). A killed rank must fail the next update with an error that names the
cause, and the server must exit non-zero."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import torch

TINY = ["--backend", "tiny", "--tiny-d-model", "32", "--lora-rank", "4", "--seed", "0", "--threads", "1",
        "--device", "cpu", "--dist-timeout", "60", "--dtype", "float64"]
# float64: see the module docstring (float32's rounding of sums taken in another
# order made a fresh Adam step differ by 1.4e-5 on an AVX-512 CPU, 2.1e-5 elsewhere).
F64_TOL = 1e-9
PROMPTS = [{"text": "hello there"}, {"text": "a second, longer prompt"}, {"text": "x"}]
# Hang guards only (never a speed assertion): a broken start or collective must not stall the suite.
START_S = 180
EXIT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """One trainer (1 process, N ranks started by hand, or torchrun) serving on a free port."""

    def __init__(self, tmp: Path, name: str, ranks: int = 1, torchrun: bool = False, extra: Optional[List[str]] = None):
        self.dir = tmp / name
        self.dir.mkdir()
        self.ck = self.dir / "ck"
        port_file = self.dir / "port"
        argv = TINY + (extra or []) + ["--port", "0", "--port-file", str(port_file), "--checkpoint-dir", str(self.ck)]
        self.procs: List[subprocess.Popen] = []
        self.logs = []
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if torchrun:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
                   "-m", "lora_trainer"] + argv
            self._spawn(cmd, env, "torchrun")
        elif ranks == 1:
            self._spawn([sys.executable, "-m", "lora_trainer"] + argv, env, "single")
        else:
            master = str(free_port())
            for r in range(ranks):
                renv = dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks),
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=master)
                self._spawn([sys.executable, "-m", "lora_trainer"] + argv, renv, f"rank{r}")
        deadline = time.monotonic() + START_S
        while not (port_file.exists() and port_file.read_text().strip()):
            for p in self.procs:
                if p.poll() is not None:
                    raise AssertionError(f"{name}: a process exited during startup ({p.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{name}: not listening after {START_S}s:\n{self.log()}")
            time.sleep(0.1)
        self.url = f"http://127.0.0.1:{int(port_file.read_text())}"

    def _spawn(self, cmd, env, tag):
        log = open(self.dir / f"{tag}.log", "wb")
        self.logs.append(self.dir / f"{tag}.log")
        self.procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        log.close()

    def log(self) -> str:
        return "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-3000:] for p in self.logs)

    def call(self, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def ok(self, path: str, body=None) -> Dict:
        status, out = self.call(path, body)
        assert status == 200, (path, out, self.log())
        return out

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=EXIT_S)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture
def procs(tmp_path):
    started: List[Proc] = []

    def start(name, **kw) -> Proc:
        p = Proc(tmp_path, name, **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        p.close()


def adapter(p: Proc, name: str) -> Dict[str, torch.Tensor]:
    p.ok("/v1/save", {"step_id": f"save-{name}", "name": name})
    d = p.ck / name / "adapter"
    if (d / "adapter_model.safetensors").exists():  # the hf backend: PEFT's file
        from safetensors.torch import load_file

        return load_file(str(d / "adapter_model.safetensors"))
    return torch.load(d / "adapter.pt", weights_only=True)


def grpo_body(single: Proc, step_id: str, loss_type: str, **extra) -> Dict:
    smp = single.ok("/v1/sample", {"prompts": PROMPTS, "n": 3, "temperature": 1.0, "max_tokens": 6, "seed": 5})["samples"]
    samples = [{"prompt": PROMPTS[s["prompt_index"]], "token_ids": s["token_ids"], "old_logprobs": s["logprobs"],
                "advantage": [1.0, -0.5, -0.5][s["sample_index"]] * (1 + s["prompt_index"])} for s in smp]
    return dict({"step_id": step_id, "samples": samples,
                 "loss": {"type": loss_type, "learning_rate": 0.01, "kl_coef": 0.1, "max_grad_norm": 0.0}}, **extra)


def rel_close(a: float, b: float, tol: float = 1e-5) -> bool:
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-12)


def same_update(single: Proc, ddp: Proc, path: str, body: Dict, tol: float = F64_TOL, loss_tol: Optional[float] = None) -> None:
    before_s, before_d = adapter(single, f"b-{body['step_id']}"), adapter(ddp, f"b-{body['step_id']}")
    out_s, out_d = single.ok(path, body), ddp.ok(path, body)
    for k in ("loss", "grad_norm") + (("kl", "entropy", "clip_frac_low", "clip_frac_high") if "samples" in body else ()):
        t = loss_tol if k == "loss" and loss_tol is not None else tol
        assert rel_close(out_s[k], out_d[k], t), (k, out_s[k], out_d[k], t)
    assert out_s["tokens"] == out_d["tokens"] and out_s["policy_version"] == out_d["policy_version"]
    after_s, after_d = adapter(single, f"a-{body['step_id']}"), adapter(ddp, f"a-{body['step_id']}")
    for n in after_s:
        ds, dd = after_s[n] - before_s[n], after_d[n] - before_d[n]
        # Relative to the tensor's update as a whole: Adam divides each element by
        # its own gradient's magnitude, which amplifies the rounding of a
        # near-zero gradient element (measured: one element of 1024 at 9e-5).
        rel = float((dd - ds).norm()) / max(float(ds.norm()), 1e-12)
        assert rel <= tol, (n, rel, tol)


@pytest.mark.parametrize("micro", [None, "2"])
def test_two_ranks_update_as_one_process(procs, micro):
    extra = ["--micro-batch-size", micro] if micro else []
    single = procs("single", extra=extra)
    ddp = procs("ddp", ranks=2, extra=extra)
    assert single.ok("/v1/info")["world_size"] == 1 and ddp.ok("/v1/info")["world_size"] == 2
    sft = {"step_id": "sft-1", "learning_rate": 0.01, "epochs": 2,
           "examples": [{"prompt": p, "completion": f"answer {k}"} for k, p in enumerate(PROMPTS)]}
    same_update(single, ddp, "/v1/sft_step", sft)
    # Without micro-batches the ranks' forward passes pad other row sets than
    # the one process's; in float64 that rounding stays far below F64_TOL.
    for k, loss_type in enumerate(("grpo", "bnpo", "dr_grpo")):
        same_update(single, ddp, "/v1/grpo_step", grpo_body(single, f"grpo-{k}", loss_type, reset_optimizer=k == 0))
    # Rank 0 alone samples: the same samples as one process from the same weights.
    a = single.ok("/v1/sample", {"prompts": PROMPTS, "n": 2, "temperature": 1.0, "max_tokens": 5, "seed": 9})["samples"]
    b = ddp.ok("/v1/sample", {"prompts": PROMPTS, "n": 2, "temperature": 1.0, "max_tokens": 5, "seed": 9})["samples"]
    assert [s["token_ids"] for s in a] == [s["token_ids"] for s in b]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_two_ranks_update_as_one_process_on_the_tiny_llama(procs, llama_dir, dtype):
    """Issue 36's target on a transformers model: the hf backend (PEFT LoRA on
    the tiny random Llama), 2 ranks against 1, micro-batches of one row so each
    forward pass sees the same rows, over SFT and three GRPO steps of different
    loss types. float64: everything within F64_TOL. float32: gradient norm, KL,
    entropy and the adapter's deltas within 1e-5 relative (measured on an
    AVX-512 CPU: 2.2e-7, 3.0e-7, 5.1e-8, 2.1e-6); the loss within 1e-4,
    because its advantages cancel (terms of either sign summing to ~0.006), so
    the sums' rounding is large next to it (measured 1.26e-5)."""
    extra = ["--backend", "hf", "--base-model", llama_dir, "--lora-rank", "4", "--micro-batch-size", "1", "--dtype", dtype]
    tol, loss_tol = (F64_TOL, None) if dtype == "float64" else (1e-5, 1e-4)
    single = procs("single", extra=extra)
    ddp = procs("ddp", ranks=2, extra=extra)
    assert ddp.ok("/v1/info")["world_size"] == 2
    sft = {"step_id": "sft-1", "learning_rate": 0.01, "epochs": 1,
           "examples": [{"prompt": p, "completion": f"answer {k}"} for k, p in enumerate(PROMPTS)]}
    same_update(single, ddp, "/v1/sft_step", sft, tol, loss_tol)
    for k, loss_type in enumerate(("grpo", "bnpo", "dr_grpo")):
        same_update(single, ddp, "/v1/grpo_step", grpo_body(single, f"grpo-{k}", loss_type, reset_optimizer=k == 0), tol, loss_tol)


def test_save_load_round_trip_on_every_rank(procs):
    single = procs("single")
    ddp = procs("ddp", ranks=2)
    for p in (single, ddp):
        p.ok("/v1/save", {"step_id": "s0", "name": "start"})
    first = grpo_body(single, "g1", "grpo")
    same_update(single, ddp, "/v1/grpo_step", first)
    # Back to the start on both: every rank of the DDP trainer must load, or
    # the next update (whose gradient is summed over the ranks) would differ.
    for p in (single, ddp):
        out = p.ok("/v1/load", {"step_id": "l0", "name": "start"})
        assert out["policy_version"] == 0
    same_update(single, ddp, "/v1/grpo_step", dict(first, step_id="g2"))
    listed = [c["name"] for c in ddp.ok("/v1/checkpoints")["checkpoints"]]
    assert "start" in listed and len(listed) == len(set(listed))  # written once, by rank 0


def test_killed_rank_fails_the_request_and_the_server_exits(procs):
    single = procs("single")
    ddp = procs("ddp", ranks=2)
    body = grpo_body(single, "g1", "grpo")
    ddp.ok("/v1/grpo_step", body)
    worker = ddp.procs[1]
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(timeout=EXIT_S)
    status, err = ddp.call("/v1/grpo_step", dict(body, step_id="g2"))
    assert status == 500, err
    msg = err["error"]["message"]
    assert "data-parallel" in msg and "rank" in msg, msg
    rank0 = ddp.procs[0]
    rc = rank0.wait(timeout=EXIT_S)
    assert rc != 0, ddp.log()


def test_torchrun_serves_two_ranks(procs):
    single = procs("single")
    ddp = procs("torchrun", ranks=2, torchrun=True)
    assert ddp.ok("/v1/info")["world_size"] == 2
    same_update(single, ddp, "/v1/grpo_step", grpo_body(single, "g1", "dapo"))


def test_weights_and_gradients_travel_in_the_widest_dtype():
    """float64 parameters are summed and broadcast in float64 (narrowed to
    float32 they made 2 ranks differ from 1 process by 1e-7 in float64 runs);
    float32 and half-precision ones in float32."""
    from lora_trainer.distributed import comm_dtype

    def params(*dtypes):
        return [torch.nn.Parameter(torch.zeros(2, dtype=d)) for d in dtypes]

    assert comm_dtype(params(torch.float64)) == torch.float64
    assert comm_dtype(params(torch.float32, torch.float64)) == torch.float64
    assert comm_dtype(params(torch.float32)) == torch.float32
    assert comm_dtype(params(torch.bfloat16, torch.float16)) == torch.float32


def test_unknown_dtype_is_refused_naming_the_flag():
    out = subprocess.run([sys.executable, "-m", "lora_trainer", "--backend", "tiny", "--dtype", "float128"],
                         capture_output=True, text=True, timeout=EXIT_S)
    assert out.returncode == 2 and "--dtype" in out.stderr and "float128" in out.stderr, out.stderr
