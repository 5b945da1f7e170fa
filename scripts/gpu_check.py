#!/usr/bin/env python3
"""GPU check of the reference LoRA trainer (scripts/lora_trainer) on a real transformers model;
the same script runs on the CPU with smaller sizes (`--device cpu`), as CI does.

Nothing is downloaded: the script builds a small Llama (LlamaConfig, random
weights) and a byte-level BPE tokenizer trained on the demo conversations,
saves them as a local model directory, and serves that with the server's HF
backend (transformers + peft; bf16 on the GPU, fp32 on the CPU). Then it

  1. runs `himes trainer check --endpoint URL`: every property must pass;
  2. runs GRPO steps (20 by default) through the harness: `himes train` with
     configs/quickstart.yaml pointed at the server (KL on, mu = 2), and reads
     the run's metrics.jsonl: step time, update time, and that the KL and
     clip-fraction metrics move; the server records the time and peak
     memory (GPU, or the process's resident set on the CPU) of every
     sample / grpo_step call;
  3. saves the trained adapter and checks that PeftModel.from_pretrained(base,
     adapter) gives the server's logprobs (and not the base model's);
  4. merges the trained adapter into one GGUF and writes its Ollama Modelfile (`himes export ollama`);
  5. data parallelism (--ddp-ranks, default 2): the trainer under torchrun
     with N ranks against one process, on the same model in float32, takes
     the same sft_step and grpo_step updates (loss, gradient norm and the
     adapter's parameter deltas within --ddp-tolerance relative), and the
     median grpo_step time of each. NCCL when there is a GPU per rank, else
     every rank on the one GPU (or the CPU) and gloo reducing on the CPU;
  6. vLLM sampling (--sampler vllm), when vLLM is installed and there is a
     GPU (else reported as skipped, with the reason): a vLLM-sampling server
     and a transformers-sampling one take the same updates; after each, their
     greedy rewrites of the same prompts must agree (vLLM's weights were
     synced), and the sample call's median time of each is reported.

It writes OUT/gpu_check.json (and the logs) and exits non-zero if a check failed.

Needs the project's Python environment (scripts/ci/setup-python.sh: torch,
transformers, peft, tokenizers, the lora_trainer package) and a himes binary:

    go build -o himes ./cmd/himes
    "$(scripts/ci/python-env.sh)" scripts/gpu_check.py --out /tmp/gpu-check [--work /tmp/gpu-work] [--himes ./himes]
    # on a CPU, with the sizes of scripts/lora_trainer/tests/test_gpu_check.py:
    "$(scripts/ci/python-env.sh)" scripts/gpu_check.py --device cpu --out /tmp/cpu-check --hidden 64 --layers 2 \
        --vocab-size 512 --steps 3 --prompts-per-step 4 --group-size 4 --max-tokens 8 --eval-turns 8 --lr 0.02 \
        --max-prompt-tokens 256
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import resource

HERE = os.path.dirname(os.path.abspath(__file__))
OLLAMA_SAFE_TARGETS = ("v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ROOT = os.path.dirname(HERE)

try:
    import torch

    from lora_trainer.cli import build_engine, parse_args
    from lora_trainer.server import CheckpointStore, TrainerService, make_http_server
except ImportError as e:
    sys.exit(f"gpu_check: {e}; run scripts/ci/setup-python.sh and use its interpreter, \"$(scripts/ci/python-env.sh)\" {sys.argv[0]}")

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def demo_texts():
    """Text to train the tokenizer on: the demo conversations shipped in the repo."""
    out = []
    for path in ("datasets/demo/train.jsonl", "datasets/demo/eval.jsonl", "datasets/demo/passages.jsonl"):
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                for key in ("question", "rewrite", "answer", "text", "title"):
                    if isinstance(rec.get(key), str):
                        out.append(rec[key])
                for m in rec.get("history") or []:
                    out.append(m.get("text", ""))
    return out


def build_base_model(directory: str, a) -> str:
    """A random-weight Llama and its tokenizer, saved as a local model directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:  # transformers 5 names the tokenizers-backed class differently
        from transformers import TokenizersBackend as PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=a.vocab_size,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(demo_texts(), trainer)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    hf_tok.chat_template = CHAT_TEMPLATE
    cfg = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=a.hidden,
        intermediate_size=a.hidden * 11 // 4,
        num_hidden_layers=a.layers,
        num_attention_heads=a.hidden // 64,
        num_key_value_heads=max(1, a.hidden // 256),
        max_position_embeddings=4096,
        bos_token_id=hf_tok.bos_token_id,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(directory)
    hf_tok.save_pretrained(directory)
    n = sum(p.numel() for p in model.parameters())
    log(f"built a random Llama: {n / 1e6:.1f}M parameters, vocab {len(hf_tok)}, saved to {directory}")
    return directory


def peak_rss_gib() -> float:
    """The process's peak resident set (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


class CallStats:
    """Time and peak memory of each engine call, measured inside the server:
    GPU memory allocated on CUDA, the process's peak resident set on the CPU
    (a high-water mark since the start, not per call)."""

    def __init__(self, cuda: bool):
        self.calls = {}
        self.cuda = cuda
        self.lock = threading.Lock()

    def wrap(self, name, fn):
        def timed(*args, **kw):
            if self.cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                if self.cuda:
                    torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated() / 2**30 if self.cuda else peak_rss_gib()
                with self.lock:
                    self.calls.setdefault(name, []).append({"seconds": time.perf_counter() - t, "peak_gib": peak})

        return timed

    def summary(self, name):
        xs = self.calls.get(name, [])
        if not xs:
            return {"calls": 0}
        secs = sorted(x["seconds"] for x in xs)
        return {
            "calls": len(xs),
            "median_s": secs[len(secs) // 2],
            "max_s": secs[-1],
            "peak_gib": max(x["peak_gib"] for x in xs),
        }


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def run(cmd, log_path, timeout):
    log("$ " + " ".join(cmd))
    env = dict(os.environ, CI="true")
    with open(log_path, "w", encoding="utf-8") as f:
        p = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, env=env)
    with open(log_path, encoding="utf-8") as f:
        text = f.read()
    return p.returncode, text


def moves(xs, eps=1e-9):
    """True when the series is not constant and not all zero."""
    return len(xs) > 1 and max(abs(x) for x in xs) > eps and max(xs) - min(xs) > eps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for gpu_check.json and the logs")
    ap.add_argument("--work", default="", help="directory for the model, checkpoints and run (default OUT/work)")
    ap.add_argument("--himes", default="", help="himes binary (default: ./himes, else `go build`)")
    ap.add_argument("--device", default="cuda", help="cuda (bf16) or cpu (fp32, with smaller sizes)")
    ap.add_argument("--hidden", type=int, default=1024, help="hidden size; heads of 64 dimensions")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--eval-turns", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.0002, help="grpo.learning_rate of the himes train run")
    ap.add_argument("--max-prompt-tokens", type=int, default=0,
                    help="the server's --max-prompt-tokens (0 = whole prompts); a CPU run keeps the last 256")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ddp-ranks", type=int, default=2, help="check 5: torchrun ranks against one process (0 = skip)")
    ap.add_argument("--ddp-steps", type=int, default=3, help="check 5: grpo_steps timed on each")
    ap.add_argument("--ddp-tolerance", type=float, default=1e-4, help="check 5: relative tolerance of the comparison")
    ap.add_argument("--ddp-micro-batch-size", type=int, default=1,
                    help="check 5: rows per forward pass on both sides (1 = every row alone, padded alike on both sides; "
                         "0 = whole request: the ranks pad their shards to other lengths than one process, the float sums "
                         "differ, and Adam turns a gradient coordinate near 0 whose sign flips into a 2·lr step)")
    ap.add_argument("--ddp-threads", type=int, default=0,
                    help="check 5, on a CPU: threads per rank (one process gets ranks × this); 0 = each process's default")
    ap.add_argument("--vllm-agreement", type=float, default=0.9,
                    help="check 6: least share of prompts whose greedy first token agrees between vLLM and transformers")
    a = ap.parse_args()
    cuda = a.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("gpu_check: no CUDA device (use --device cpu with smaller sizes)", file=sys.stderr)
        return 2
    if a.hidden % 64:
        print(f"gpu_check: --hidden {a.hidden}: want a multiple of 64 (heads of 64 dimensions)", file=sys.stderr)
        return 2
    out = os.path.abspath(a.out)
    work = os.path.abspath(a.work or os.path.join(out, "work"))
    os.makedirs(out, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    himes = a.himes or os.path.join(ROOT, "himes")
    if not os.path.exists(himes):
        himes = os.path.join(work, "himes")
        subprocess.run(["go", "build", "-o", himes, "./cmd/himes"], cwd=ROOT, check=True)
    import peft
    import transformers

    result = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "dtype": "bfloat16" if cuda else "float32",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__},
        "ok": True,
    }

    def fail(what):
        result["ok"] = False
        result.setdefault("failures", []).append(what)
        log("FAIL " + what)

    base_dir = build_base_model(os.path.join(work, "base-model"), a)
    result["model"] = {"hidden": a.hidden, "layers": a.layers, "vocab_size": a.vocab_size}

    args = parse_args(["--backend", "hf", "--base-model", base_dir, "--port", "0", "--checkpoint-dir", os.path.join(work, "lora_checkpoints"),
                       "--lora-rank", "16", "--lora-alpha", "32", "--seed", str(a.seed), "--device", a.device,
                       # The modules Ollama v0.6.5 converts faithfully on a llama base: it permutes the
                       # rotary rows of q_proj/k_proj adapters wrongly, so `himes export ollama` (step 4)
                       # refuses an adapter that targets them.
                       "--lora-target-modules", ",".join(OLLAMA_SAFE_TARGETS),
                       "--max-prompt-tokens", str(a.max_prompt_tokens)])
    engine = build_engine(args)
    stats = CallStats(cuda)
    for name in ("sample", "grpo_step", "sft_step", "logprobs"):
        setattr(engine, name, stats.wrap(name, getattr(engine, name)))
    srv = make_http_server(TrainerService(engine, CheckpointStore(args.checkpoint_dir)), "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    log(f"serving on {url}")
    try:
        # 1. conformance
        rc, text = run([himes, "trainer", "check", "--endpoint", url], os.path.join(out, "check.log"), 600)
        result["conformance"] = {"passed": rc == 0, "report": [l for l in text.splitlines() if l.startswith(("PASS", "FAIL"))]}
        if rc != 0:
            fail("himes trainer check")

        # 2. GRPO steps through the harness
        run_dir = os.path.join(work, "runs")
        cmd = [himes, "train", "--config", "configs/quickstart.yaml",
               "--set", f"trainer.endpoint={url}", "--set", f"grpo.steps={a.steps}",
               "--set", f"grpo.prompts_per_step={a.prompts_per_step}", "--set", f"grpo.group_size={a.group_size}",
               "--set", f"grpo.max_tokens={a.max_tokens}",
               "--set", f"grpo.learning_rate={a.lr}", "--set", "grpo.loss.mu=2", "--set", "grpo.loss.kl_coef=0.04",
               "--set", f"grpo.eval_every={max(a.steps // 2, 1)}", "--set", f"grpo.eval_turns={a.eval_turns}",
               "--set", f"grpo.checkpoint_every={max(a.steps // 2, 1)}",
               # The check is of the adapter GRPO trained: a random-weight model's Recall@10 stays 0,
               # so the "best" checkpoint would be step 0's (the untrained adapter).
               "--set", "grpo.load_best_at_end=false",
               "--set", f"run.output_dir={run_dir}", "--set", "run.name=gpu-check"]
        t0 = time.perf_counter()
        rc, text = run(cmd, os.path.join(out, "train.log"), 420)
        result["train_wall_s"] = time.perf_counter() - t0
        if rc != 0:
            fail(f"himes train exited {rc} (see train.log)")
        steps = []
        for path in glob.glob(os.path.join(run_dir, "**", "metrics.jsonl"), recursive=True):
            with open(path, encoding="utf-8") as f:
                steps += [m for m in map(json.loads, f) if m.get("kind") == "step"]
        steps.sort(key=lambda m: m["step"])
        series = {k: [m.get(k, 0.0) for m in steps] for k in ("kl", "clip_frac_low", "clip_frac_high", "reward_mean", "loss",
                                                                 "t_step_s", "t_update_s", "t_sample_s")}
        result["train"] = {
            "steps": len(steps),
            "median_step_s": sorted(series["t_step_s"])[len(steps) // 2] if steps else None,
            "median_update_s": sorted(series["t_update_s"])[len(steps) // 2] if steps else None,
            "median_sample_s": sorted(series["t_sample_s"])[len(steps) // 2] if steps else None,
            "kl_moves": moves(series["kl"]),
            "clip_moves": moves([x + y for x, y in zip(series["clip_frac_low"], series["clip_frac_high"])]),
            "series": series,
        }
        if len(steps) < a.steps:
            fail(f"{len(steps)} step lines in metrics.jsonl, want {a.steps}")
        if not result["train"]["kl_moves"]:
            fail("the KL metric did not move")
        if not result["train"]["clip_moves"]:
            fail("the clip-fraction metrics did not move")
        result["server"] = {n: stats.summary(n) for n in ("sample", "grpo_step", "sft_step", "logprobs")}
        result["peak_gib"] = max((s.get("peak_gib", 0) for s in result["server"].values()), default=0)

        # 3. the saved adapter is a plain PEFT adapter
        post(url, "/v1/save", {"step_id": f"gpu-check-save-{time.time()}", "name": "gpu-check-final"})
        ck = os.path.join(args.checkpoint_dir, "gpu-check-final")
        prompt = {"messages": [{"role": "user", "content": "What caused the Bronze Age collapse?"}]}
        sample = post(url, "/v1/sample", {"prompts": [prompt], "temperature": 1.0, "max_tokens": 16, "seed": 3})["samples"][0]
        server_lp = post(url, "/v1/logprobs", {"items": [{"prompt": prompt, "token_ids": sample["token_ids"]}]})["logprobs"][0]
        result["peft_reload"] = peft_reload_check(base_dir, os.path.join(ck, "adapter"), engine, prompt, sample["token_ids"], server_lp,
                                                  a.device, torch.bfloat16 if cuda else torch.float32)
        if not result["peft_reload"]["matches_server"] or not result["peft_reload"]["differs_from_base"]:
            fail("PeftModel.from_pretrained does not reproduce the server's logprobs")

        # 4. Ollama export of the trained adapter
        rc, text = run([himes, "export", "ollama", "--base", base_dir, "--adapter", ck, "--out", os.path.join(work, "ollama")],
                       os.path.join(out, "export.log"), 600)
        result["export_ollama"] = {"rc": rc, "modelfile": open(os.path.join(work, "ollama", "Modelfile")).read() if rc == 0 else text}
        if rc != 0:
            fail("himes export ollama: " + (text.strip().splitlines() or ["(no output)"])[-1])

        # 5. data parallelism
        if a.ddp_ranks > 1:
            result["ddp"] = ddp_check(base_dir, a, os.path.join(work, "ddp"), out)
            if not result["ddp"]["ok"]:
                fail("data-parallel update differs from one process: " + "; ".join(result["ddp"]["problems"]))

        # 6. vLLM sampling with synced weights
        result["vllm"] = vllm_check(base_dir, a, os.path.join(work, "vllm"), out)
        if not result["vllm"].get("skipped") and not result["vllm"]["ok"]:
            fail("vLLM sampling: " + "; ".join(result["vllm"]["problems"]))
    finally:
        srv.shutdown()
        with open(os.path.join(out, "gpu_check.json"), "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    print(json.dumps({k: v for k, v in result.items() if k not in ("train",)}, indent=2))
    print(json.dumps({k: v for k, v in result.get("train", {}).items() if k != "series"}, indent=2))
    return 0 if result["ok"] else 1


class Trainer:
    """A lora_trainer server in child processes (1, or N ranks under torchrun), on a free port."""

    def __init__(self, argv, ranks, directory, log_path):
        os.makedirs(directory, exist_ok=True)
        self.port_file = os.path.join(directory, "port")
        self.ck = os.path.join(directory, "ck")
        cmd = [sys.executable] + (["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)] if ranks > 1 else [])
        cmd += ["-m", "lora_trainer"] + argv + ["--port", "0", "--port-file", self.port_file, "--checkpoint-dir", self.ck]
        log("$ " + " ".join(cmd))
        self.log_file = open(log_path, "w", encoding="utf-8")
        self.p = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log_file, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 600
        while not (os.path.exists(self.port_file) and open(self.port_file).read().strip()):
            if self.p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"trainer ({ranks} ranks) did not start: see {log_path}")
            time.sleep(0.2)
        self.url = f"http://127.0.0.1:{int(open(self.port_file).read())}"

    def adapter(self, name):
        from safetensors.torch import load_file

        post(self.url, "/v1/save", {"step_id": f"save-{name}", "name": name})
        return load_file(os.path.join(self.ck, name, "adapter", "adapter_model.safetensors"))

    def close(self):
        import signal

        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.log_file.close()


def ddp_check(base_dir, a, work, out):
    """Check 5: N ranks take one process's update; the grpo_step time of each."""
    micro = getattr(a, "ddp_micro_batch_size", 1)
    argv = ["--backend", "hf", "--base-model", base_dir, "--dtype", "float32", "--device", a.device, "--lora-rank", "16",
            "--seed", str(a.seed), "--max-prompt-tokens", str(a.max_prompt_tokens or 256), "--dist-timeout", "120",
            "--micro-batch-size", str(micro)]
    # On a CPU the two sides get the same cores: one process T × N threads, each of N ranks T.
    threads = getattr(a, "ddp_threads", 0)
    one_argv = argv + (["--threads", str(threads * a.ddp_ranks)] if threads else [])
    many_argv = argv + (["--threads", str(threads)] if threads else [])
    prompts = [{"messages": [{"role": "user", "content": t}]} for t in demo_texts()[: 2 * a.ddp_ranks]]
    res = {"ranks": a.ddp_ranks, "micro_batch_size": micro, "threads_per_rank": threads, "ok": True, "problems": []}
    one = Trainer(one_argv, 1, os.path.join(work, "one"), os.path.join(out, "ddp-one.log"))
    many = None
    try:
        many = Trainer(many_argv, a.ddp_ranks, os.path.join(work, "many"), os.path.join(out, "ddp-many.log"))
        with urllib.request.urlopen(many.url + "/v1/info", timeout=60) as r:
            res["world_size"] = json.loads(r.read())["world_size"]
        if res["world_size"] != a.ddp_ranks:
            res["problems"].append(f"info.world_size {res['world_size']}, want {a.ddp_ranks}")
        sft = {"step_id": "sft", "learning_rate": 1e-3, "epochs": 1,
               "examples": [{"prompt": p, "completion": "a short answer"} for p in prompts]}
        smp = post(one.url, "/v1/sample", {"prompts": prompts, "n": 4, "temperature": 1.0, "max_tokens": 16, "seed": 1})["samples"]
        grpo = {"loss": {"learning_rate": 1e-3, "kl_coef": 0.04},
                "samples": [{"prompt": prompts[s["prompt_index"]], "token_ids": s["token_ids"], "old_logprobs": s["logprobs"],
                             "advantage": 1.0 - 2 * (s["sample_index"] % 2)} for s in smp]}
        bodies = [("/v1/sft_step", sft)] + [("/v1/grpo_step", dict(grpo, step_id=f"grpo-{k}")) for k in range(a.ddp_steps)]
        times = {"one": [], "many": []}
        worst = 0.0
        by = {}
        for k, (path, body) in enumerate(bodies):
            outs, deltas = {}, {}
            for name, t in (("one", one), ("many", many)):
                before = t.adapter(f"before-{k}")
                t0 = time.perf_counter()
                outs[name] = post(t.url, path, body)
                if path == "/v1/grpo_step":
                    times[name].append(time.perf_counter() - t0)
                after = t.adapter(f"after-{k}")
                deltas[name] = torch.cat([(after[n].float() - before[n].float()).reshape(-1) for n in sorted(after)])
            for key in ("loss", "grad_norm"):
                x, y = outs["one"][key], outs["many"][key]
                rel = abs(x - y) / max(abs(x), abs(y), 1e-12)
                worst = max(worst, rel)
                by[key] = max(by.get(key, 0.0), rel)
                if rel > a.ddp_tolerance:
                    res["problems"].append(f"{path} {key}: {x} vs {y}")
            d1, dn = deltas["one"], deltas["many"]
            rel = float((d1 - dn).norm() / max(float(d1.norm()), 1e-12))
            worst = max(worst, rel)
            by["parameter_delta"] = max(by.get("parameter_delta", 0.0), rel)
            # Adam's first steps move each weight by about lr·sign(g): a
            # gradient coordinate near 0 whose sign a different float sum
            # flips moves its weight by 2·lr. Counted to tell that apart from
            # a real difference of the gradients.
            flips = int(((d1 * dn) < 0).sum())
            by["sign_flipped_deltas"] = max(by.get("sign_flipped_deltas", 0), flips)
            if rel > a.ddp_tolerance:
                res["problems"].append(f"{path} parameter delta: relative difference {rel:.2e}")
        res["max_relative_difference"] = worst
        res["max_relative_difference_by"] = by
        res["parameters"] = int(d1.numel())
        res["median_grpo_step_s"] = {n: sorted(v)[len(v) // 2] for n, v in times.items() if v}
        res["grpo_step_s"] = times
        res["ok"] = not res["problems"]
    except Exception as e:  # noqa: BLE001 - reported, and the check fails
        res["ok"] = False
        res["problems"].append(f"{type(e).__name__}: {e}")
    finally:
        one.close()
        if many is not None:
            many.close()
    log(f"ddp: {json.dumps(res)}")
    return res


def vllm_check(base_dir, a, work, out):
    """Check 6: vLLM samples with the policy's weights after every update."""
    from lora_trainer.vllm_sampler import vllm_available

    ok, why = vllm_available()
    if not ok:
        log(f"vllm: skipped ({why})")
        return {"skipped": why}
    argv = ["--backend", "hf", "--base-model", base_dir, "--device", a.device, "--lora-rank", "16", "--seed", str(a.seed),
            "--max-prompt-tokens", str(a.max_prompt_tokens or 256)]
    prompts = [{"messages": [{"role": "user", "content": t}]} for t in demo_texts()[:16]]
    res = {"ok": True, "problems": [], "agreement": []}
    plain = Trainer(argv + ["--sampler", "transformers"], 1, os.path.join(work, "plain"), os.path.join(out, "vllm-plain.log"))
    fast = None
    try:
        fast = Trainer(argv + ["--sampler", "vllm"], 1, os.path.join(work, "vllm"), os.path.join(out, "vllm-server.log"))
        with urllib.request.urlopen(fast.url + "/v1/info", timeout=60) as r:
            res["sampler"] = json.loads(r.read()).get("sampler")
        if res["sampler"] != "vllm":
            res["problems"].append(f"info.sampler {res['sampler']!r}, want 'vllm'")
        times = {"plain": [], "vllm": []}
        for k in range(3):
            greedy = {}
            for name, t in (("plain", plain), ("vllm", fast)):
                t0 = time.perf_counter()
                body = {"prompts": prompts, "n": 1, "temperature": 0.0, "max_tokens": 16, "seed": 1}
                greedy[name] = post(t.url, "/v1/sample", body)["samples"]
                times[name].append(time.perf_counter() - t0)
            same = sum(1 for x, y in zip(greedy["plain"], greedy["vllm"]) if x["token_ids"][:1] == y["token_ids"][:1])
            res["agreement"].append(same / len(prompts))
            if same < a.vllm_agreement * len(prompts):
                res["problems"].append(f"after {k} updates: greedy first tokens agree on {same}/{len(prompts)} prompts")
            # The same update on both: samples drawn by the transformers server.
            smp = post(plain.url, "/v1/sample", {"prompts": prompts, "n": 2, "temperature": 1.0, "max_tokens": 16, "seed": k})["samples"]
            body = {"step_id": f"grpo-{k}", "loss": {"learning_rate": 5e-3},
                    "samples": [{"prompt": prompts[x["prompt_index"]], "token_ids": x["token_ids"], "old_logprobs": x["logprobs"],
                                 "advantage": 1.0 - 2 * (x["sample_index"] % 2)} for x in smp]}
            for t in (plain, fast):
                post(t.url, "/v1/grpo_step", body)
        res["median_sample_s"] = {n: sorted(v)[len(v) // 2] for n, v in times.items()}
        res["ok"] = not res["problems"]
    except Exception as e:  # noqa: BLE001 - reported, and the check fails
        res["ok"] = False
        res["problems"].append(f"{type(e).__name__}: {e}")
    finally:
        plain.close()
        if fast is not None:
            fast.close()
    log(f"vllm: {json.dumps(res)}")
    return res


def peft_reload_check(base_dir, adapter_dir, engine, prompt, token_ids, server_lp, device, dtype):
    """Load base + adapter with plain transformers/peft and score the same tokens."""
    import peft
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir).to(device, dtype)
    model = peft.PeftModel.from_pretrained(base, adapter_dir).eval()
    p = engine.encode_prompt({"text": "", "messages": prompt["messages"]}, "prompt")
    ids = torch.tensor([p + token_ids], device=device)
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        with model.disable_adapter():
            lp_base = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    got = [float(lp[len(p) - 1 + t, tok]) for t, tok in enumerate(token_ids)]
    base_lp = [float(lp_base[len(p) - 1 + t, tok]) for t, tok in enumerate(token_ids)]
    diff = max(abs(x - y) for x, y in zip(got, server_lp)) if got else 0.0
    base_diff = max(abs(x - y) for x, y in zip(base_lp, server_lp)) if got else 0.0
    del model, base
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    # bf16 forward passes of differently shaped batches agree to a few 1e-2
    # nats; fp32 ones to about 1e-6.
    tol = 0.05 if dtype == torch.bfloat16 else 1e-4
    return {"max_abs_diff": diff, "max_abs_diff_base": base_diff, "tolerance": tol, "matches_server": diff < tol,
            "differs_from_base": base_diff > 2 * diff + 1e-3}


if __name__ == "__main__":
    sys.exit(main())
