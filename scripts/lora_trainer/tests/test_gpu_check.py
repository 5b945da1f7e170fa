"""scripts/gpu_check.py, the same script as on a GPU, on the CPU with small
sizes; its JSON report is checked here."""

import json
import os
import subprocess
import sys

from .conftest import ROOT

SIZES = ["--hidden", "64", "--layers", "2", "--vocab-size", "512", "--steps", "3", "--prompts-per-step", "4",
         "--group-size", "4", "--max-tokens", "8", "--eval-turns", "8", "--lr", "0.02", "--max-prompt-tokens", "256"]


def test_gpu_check_on_the_cpu(tmp_path, himes_bin, hf_available):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_check.py"), "--device", "cpu", "--out", str(out),
                        "--himes", himes_bin] + SIZES, cwd=ROOT, capture_output=True, text=True, timeout=900)
    path = out / "gpu_check.json"
    assert path.exists(), p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads(path.read_text())
    assert p.returncode == 0 and r["ok"] is True, (r.get("failures"), p.stdout[-3000:], p.stderr[-3000:])
    assert r["device"] == "cpu" and r["dtype"] == "float32"
    assert set(r["versions"]) == {"torch", "transformers", "peft"}
    assert r["model"] == {"hidden": 64, "layers": 2, "vocab_size": 512}
    # 1. every conformance property passed
    assert r["conformance"]["passed"] is True
    assert len(r["conformance"]["report"]) >= 15 and all(x.startswith("PASS") for x in r["conformance"]["report"])
    # 2. the harness ran every step and the metrics moved
    t = r["train"]
    assert t["steps"] == 3 and t["kl_moves"] is True and t["clip_moves"] is True
    assert all(len(v) == 3 for v in t["series"].values())
    assert t["median_step_s"] > 0 and t["median_update_s"] > 0 and t["median_sample_s"] > 0
    assert r["server"]["grpo_step"]["calls"] >= 3 and r["server"]["sample"]["calls"] >= 3
    assert 0 < r["peak_gib"] < 64
    # 3. PEFT reloads the adapter to the server's logprobs, and they are not the base model's
    pr = r["peft_reload"]
    assert pr["matches_server"] is True and pr["max_abs_diff"] <= pr["tolerance"] == 1e-4
    assert pr["differs_from_base"] is True
    # 4. the Ollama export merged the adapter into one GGUF and wrote a Modelfile FROM it
    assert r["export_ollama"]["rc"] == 0 and "model.gguf" in r["export_ollama"]["modelfile"], r["export_ollama"]
    # 5. two torchrun ranks (gloo on the CPU) take the one-process update
    ddp = r["ddp"]
    assert ddp["ok"] is True and ddp["world_size"] == 2, ddp
    assert ddp["max_relative_difference"] <= 1e-4 and set(ddp["median_grpo_step_s"]) == {"one", "many"}
    # 6. vLLM: not on a CPU; reported as skipped with the reason, not passed
    assert r["vllm"] == {"skipped": "vllm is not installed"} or r["vllm"] == {"skipped": "no CUDA GPU"}, r["vllm"]
