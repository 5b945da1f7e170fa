#!/usr/bin/env python3
"""Seconds per GRPO step: the LoRA trainer's hf backend against TRL's
GRPOTrainer doing the same work on the same model, side by side in one
process and one time window (a benchmark, not a test).

The work of one step: 16 prompts x G = 8 sampled completions of up to 16 new
tokens at temperature 1, then one clipped-surrogate update (loss grpo, mu 1,
no KL) of the same LoRA (r 8, alpha 16, q/k/v/o) with AdamW, in float32 on
the CPU with one torch thread. The model is the tests' tiny random-weight
Llama (scripts/lora_trainer/tests/chatml_model.py), so the numbers measure
the frameworks' overhead and their batching, which is what differs.

hf backend, through its HTTP server (loopback, in-process thread):
  sampling   Engine.sample                       (/v1/sample)
  logprob    forward passes inside grpo_step     (Engine._completion_logits)
  backward   the rest of grpo_step: loss terms and backward
  optimizer  Engine._optimizer_step (clip + AdamW)
  http       wall time of the two calls minus the engine's time in them
TRL (GRPOTrainer.train stopped after each step by a callback, random rewards;
the step is timed from on_step_begin to on_step_end):
  sampling   _generate_and_score_completions (generation, rewards, advantages)
  logprob    compute_loss (forward and loss)
  backward   accelerator.backward
  optimizer  optimizer.step

Steps alternate hf, TRL, hf, TRL, ... after one warm-up step each. Prints one
JSON object: per-framework medians, the ratio TRL/hf of the step time, the
load average before and after.

  .venv/bin/python scripts/bench_hf_vs_trl.py [--steps 3]
"""

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS, G, MAX_NEW, RANK, ALPHA = 16, 8, 16, 8, 16
TARGETS = "q_proj,k_proj,v_proj,o_proj"
QUESTIONS = [
    "what caused the bronze age collapse?", "how did the hittite empire end?", "which cities were destroyed?",
    "what about egypt?", "who were the sea peoples?", "when did ugarit fall?", "what was traded for tin?",
    "why did the palaces burn?", "how long did the drought last?", "what happened to mycenae?",
    "did hattusa survive?", "where did the raiders come from?", "what ended the trade networks?",
    "how did egypt survive?", "what came after the collapse?", "who wrote about it?",
]


class Timers:
    """Accumulated seconds per phase, by wrapping methods."""

    def __init__(self):
        self.t = {}

    def wrap(self, obj, name, phase):
        orig = getattr(obj, name)

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return orig(*a, **kw)
            finally:
                self.t[phase] = self.t.get(phase, 0.0) + time.perf_counter() - t0

        setattr(obj, name, timed)

    def take(self):
        out, self.t = self.t, {}
        return out


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def hf_side(model_dir, ckpt):
    from lora_trainer.cli import build_engine, parse_args
    from lora_trainer.server import CheckpointStore, TrainerService, make_http_server

    args = parse_args(["--backend", "hf", "--base-model", model_dir, "--lora-rank", str(RANK), "--lora-alpha", str(ALPHA),
                       "--lora-target-modules", TARGETS, "--seed", "1", "--device", "cpu", "--threads", "1",
                       "--checkpoint-dir", ckpt, "--limit-n", "64", "--limit-prompts", "64", "--limit-batch", "1024"])
    engine = build_engine(args)
    http = make_http_server(TrainerService(engine, CheckpointStore(ckpt)), "127.0.0.1", 0)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{http.server_address[1]}/v1"
    timers = Timers()
    timers.wrap(engine, "sample", "sampling")
    timers.wrap(engine, "_completion_logits", "logprob")
    timers.wrap(engine, "_optimizer_step", "optimizer")
    timers.wrap(engine, "grpo_step", "grpo_step")
    prompts = [{"messages": [{"role": "system", "content": "rewrite the question so that it stands alone."},
                             {"role": "user", "content": q}]} for q in QUESTIONS[:PROMPTS]]
    rng = random.Random(0)
    step_id = [0]

    def step():
        t0 = time.perf_counter()
        samples = post(url + "/sample", {"prompts": prompts, "n": G, "temperature": 1.0, "max_tokens": MAX_NEW,
                                         "seed": step_id[0]})["samples"]
        items = [{"prompt": prompts[s["prompt_index"]], "token_ids": s["token_ids"], "old_logprobs": s["logprobs"],
                  "advantage": rng.gauss(0, 1)} for s in samples]
        step_id[0] += 1
        post(url + "/grpo_step", {"step_id": f"bench-{step_id[0]}", "samples": items,
                                  "loss": {"type": "grpo", "learning_rate": 1e-4, "kl_coef": 0.0, "mu": 1}})
        wall = time.perf_counter() - t0
        t = timers.take()
        engine_s = t.get("sampling", 0) + t.get("grpo_step", 0)
        return {"step_s": wall, "sampling": t.get("sampling", 0), "logprob": t.get("logprob", 0),
                "backward": t.get("grpo_step", 0) - t.get("logprob", 0) - t.get("optimizer", 0),
                "optimizer": t.get("optimizer", 0), "http": wall - engine_s, "completions": len(samples)}

    return step, http


def trl_side(model_dir, work):
    import datasets
    import peft
    import torch
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    base = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(1)
    model = peft.get_peft_model(base, peft.LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0,
                                                      target_modules=TARGETS.split(","), bias="none", task_type="CAUSAL_LM"))
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    rng = random.Random(0)
    data = datasets.Dataset.from_list([{"prompt": [{"role": "system", "content": "rewrite the question so that it stands alone."},
                                                   {"role": "user", "content": q}]} for q in QUESTIONS[:PROMPTS]])
    args = GRPOConfig(output_dir=work, per_device_train_batch_size=PROMPTS * G, num_generations=G,
                      max_completion_length=MAX_NEW, temperature=1.0, learning_rate=1e-4, beta=0.0, loss_type="grpo",
                      num_iterations=1, max_steps=10_000, use_cpu=True, bf16=False, report_to=[],
                      logging_strategy="no", save_strategy="no", seed=1, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [rng.gauss(0, 1) for _ in completions]],
                          args=args, train_dataset=data, processing_class=tok)
    timers = Timers()
    timers.wrap(trainer, "_generate_and_score_completions", "sampling")
    timers.wrap(trainer, "compute_loss", "logprob")
    timers.wrap(trainer.accelerator, "backward", "backward")
    # Every torch AdamW's step (the hf engine's too: its time is taken apart
    # by the hf timers, and these are reset before each TRL step).
    timers.wrap(torch.optim.AdamW, "step", "optimizer")
    marks = []

    class Clock(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            marks.append(("begin", time.perf_counter()))

        def on_step_end(self, args, state, control, **kw):
            marks.append(("end", time.perf_counter()))
            control.should_training_stop = True  # one step per train() call: the caller interleaves

    trainer.add_callback(Clock())

    def step():
        # One step per train() call; the step is timed from the callbacks, so
        # train()'s own setup (dataloader, scheduler) is not counted.
        timers.take()
        marks.clear()
        trainer.train(resume_from_checkpoint=None)
        (b, t0), (e, t1) = marks[0], marks[-1]
        assert (b, e) == ("begin", "end"), marks
        wall = t1 - t0
        t = timers.take()
        return {"step_s": wall, "sampling": t.get("sampling", 0), "logprob": t.get("logprob", 0),
                "backward": t.get("backward", 0), "optimizer": t.get("optimizer", 0), "http": 0.0,
                "completions": PROMPTS * G}

    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3, help="measured steps per framework (after one warm-up each)")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(ROOT, "scripts", "lora_trainer"))
    from tests.chatml_model import build_model

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(os.path.join(tmp, "tiny-llama"))
        hf_step, http = hf_side(model_dir, os.path.join(tmp, "ck"))
        trl_step = trl_side(model_dir, os.path.join(tmp, "trl"))
        runs = {"hf": [], "trl": []}
        with contextlib.redirect_stdout(sys.stderr):
            hf_step(), trl_step()  # warm-up
            for _ in range(a.steps):
                runs["hf"].append(hf_step())
                runs["trl"].append(trl_step())
        http.shutdown()
    med = {k: {f: round(statistics.median(r[f] for r in v), 3) for f in v[0]} for k, v in runs.items()}
    print(json.dumps({
        "work": f"{PROMPTS} prompts x G={G}, <= {MAX_NEW} new tokens, LoRA r={RANK} on {TARGETS}, fp32, 1 torch thread",
        "steps": a.steps, "median_s": med,
        "ratio_trl_over_hf": round(med["trl"]["step_s"] / med["hf"]["step_s"], 2),
        "all_steps_s": {k: [round(r["step_s"], 3) for r in v] for k, v in runs.items()},
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "cpus": os.cpu_count(),
    }, indent=1))


if __name__ == "__main__":
    main()
