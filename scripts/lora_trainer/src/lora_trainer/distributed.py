"""Data parallelism for the reference trainer: `torchrun --nproc_per_node N -m lora_trainer ...`.

Rank 0 serves the protocol. Every sft_step, grpo_step and load it applies is
first broadcast to the other ranks (the request as JSON, through a gloo
"command" group that may idle between requests), so every rank parses it
the same way and takes its shard of the request's micro-batches
(Collective.shard). The update is the one-process update: the loss of every
micro-batch is normalized by the whole request's sizes (token-weighted sums
over the global token count, never a local mean), the gradients are summed
across ranks (all_reduce, as DistributedDataParallel does; DDP's own wrapper
needs every forward to go through one module call, which the backends'
prompt-cache and frozen-layer paths do not), and every rank clips the same
gradient and takes the same AdamW step, so the replicas stay equal.
Checkpoints are written by rank 0 alone; sample and logprobs are served by
rank 0 alone.

A collective that fails (a rank died: its sockets close) or takes longer than
--dist-timeout raises RankFailure; the server answers the request with an
error that says so and exits non-zero.

With one process (no WORLD_SIZE in the environment) Single is used and every
method is a no-op.
"""

import datetime
import logging
import os
from typing import Any, List, Optional, Sequence, Tuple, TypeVar

import torch

log = logging.getLogger("lora_trainer")

T = TypeVar("T")

# Workers wait for the next request in the command group, however long the
# server idles; the data collectives use --dist-timeout.
IDLE_TIMEOUT = datetime.timedelta(days=30)


def comm_dtype(params: Sequence[torch.nn.Parameter]) -> torch.dtype:
    """The dtype weights and gradients travel in: float64 when a parameter is
    float64 (narrowing it would make N ranks differ from one process by float32
    rounding, which a float64 run is there to rule out), else float32 (gloo
    reduces no bfloat16, and half precision would round the sum)."""
    return torch.float64 if any(p.dtype == torch.float64 for p in params) else torch.float32


class RankFailure(RuntimeError):
    """A collective across the data-parallel ranks failed or timed out: the ranks
    may disagree, so the server must stop."""


class Single:
    """One process: nothing to share."""

    rank = 0
    world_size = 1
    backend = "none"

    def shard(self, units: Sequence[T]) -> List[T]:
        return list(units)

    def sum_floats(self, values: Sequence[float]) -> List[float]:
        return list(values)

    def all_reduce_grads(self, params: Sequence[torch.nn.Parameter]) -> None:
        return None

    def broadcast_params(self, params: Sequence[torch.nn.Parameter]) -> None:
        return None

    def announce(self, path: str, payload: Any) -> None:
        return None

    def receive(self) -> Tuple[str, Any]:
        raise RuntimeError("receive: not a data-parallel worker")

    def agree(self, ok: bool, what: str) -> None:
        return None

    def close(self) -> None:
        return None


class Collective(Single):
    """One rank of a torch.distributed process group (torchrun's environment)."""

    def __init__(self, rank: int, world_size: int, backend: str, timeout_s: float, cmd_group: Any):
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.timeout_s = timeout_s
        self.cmd_group = cmd_group
        self.device: Optional[torch.device] = None  # where gradients live; set by the server (cli)

    def _fail(self, what: str, err: BaseException) -> RankFailure:
        return RankFailure(
            f"data-parallel {what} across {self.world_size} ranks failed on rank {self.rank} "
            f"(a rank died or did not answer within --dist-timeout {self.timeout_s:g}s): {type(err).__name__}: {err}"
        )

    def _comm(self, t: torch.Tensor) -> torch.Tensor:
        # gloo reduces CPU tensors; NCCL the rank's GPU's.
        return t.cpu() if self.backend == "gloo" else t

    def _all_reduce(self, t: torch.Tensor, what: str) -> torch.Tensor:
        import torch.distributed as dist  # noqa: PLC0415

        buf = self._comm(t)
        try:
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        except Exception as e:  # noqa: BLE001 - every failure of a collective is the same to the caller
            raise self._fail(what, e) from e
        return buf

    def shard(self, units: Sequence[T]) -> List[T]:
        """This rank's units, round-robin: rank r takes units r, r+N, r+2N, ..."""
        return list(units)[self.rank :: self.world_size]

    def sum_floats(self, values: Sequence[float]) -> List[float]:
        dev = self.device if self.backend == "nccl" else torch.device("cpu")
        t = torch.tensor(list(values), dtype=torch.float64, device=dev)
        return [float(x) for x in self._all_reduce(t, "sum of step metrics").tolist()]

    def all_reduce_grads(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Sum every parameter's gradient over the ranks. A parameter that has no
        gradient on any rank keeps none (AdamW skips it, as in one process); one
        that has a gradient on some rank gets the sum (zeros elsewhere)."""
        if not params:
            return
        wire = comm_dtype(params)
        parts = []
        for p in params:
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            parts.append(g.detach().reshape(-1).to(wire))
        present = torch.tensor([1.0 if p.grad is not None else 0.0 for p in params], device=parts[0].device)
        flat = self._all_reduce(torch.cat(parts + [present]), "gradient all_reduce")
        flat = flat.to(parts[0].device)
        off = 0
        for p in params:
            n = p.numel()
            p.grad = flat[off : off + n].view_as(p).to(p.dtype).clone()
            off += n
        for p, have in zip(params, flat[off:].tolist()):
            if have == 0:
                p.grad = None

    def broadcast_params(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Rank 0's trainable weights on every rank (the start of DDP)."""
        import torch.distributed as dist  # noqa: PLC0415

        wire = comm_dtype(params)
        with torch.no_grad():
            for p in params:
                buf = self._comm(p.detach().to(wire).clone())
                try:
                    dist.broadcast(buf, src=0)
                except Exception as e:  # noqa: BLE001
                    raise self._fail("parameter broadcast", e) from e
                p.copy_(buf.to(p.device, p.dtype))

    def announce(self, path: str, payload: Any) -> None:
        """Rank 0: tell the workers to apply this call too."""
        if self.rank != 0:
            return
        self._broadcast_command((path, payload))

    def receive(self) -> Tuple[str, Any]:
        """A worker: the next call rank 0 applies (blocks while the server idles)."""
        return self._broadcast_command(None)

    def _broadcast_command(self, obj: Any) -> Any:
        import torch.distributed as dist  # noqa: PLC0415

        box = [obj]
        try:
            dist.broadcast_object_list(box, src=0, group=self.cmd_group)
        except Exception as e:  # noqa: BLE001
            raise self._fail("command broadcast", e) from e
        return box[0]

    def agree(self, ok: bool, what: str) -> None:
        """Every rank says whether it applied `what`; RankFailure unless all did."""
        failed = self._all_reduce(torch.tensor([0.0 if ok else 1.0], device=self.device if self.backend == "nccl" else "cpu"),
                                  f"agreement on {what}")
        n = int(failed.item())
        if n:
            raise RankFailure(f"{what}: failed on {n} of {self.world_size} data-parallel ranks; the replicas may differ")

    def close(self) -> None:
        import torch.distributed as dist  # noqa: PLC0415

        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception as e:  # noqa: BLE001 - exiting anyway
                log.debug("destroy_process_group: %s", e)


def world_from_env() -> Tuple[int, int, int]:
    """(rank, local rank, world size) as torchrun sets them; (0, 0, 1) outside torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    rank = int(os.environ.get("RANK", "0") or 0)
    local = int(os.environ.get("LOCAL_RANK", str(rank)) or rank)
    return rank, local, world


def rank_device(device: str, local_rank: int, world_size: int) -> str:
    """The device of one rank: --device auto/cuda gives rank k cuda:k when there
    are enough GPUs, else every rank shares cuda (then gloo reduces, on the CPU:
    NCCL refuses two ranks on one GPU)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if world_size > 1 and device == "cuda" and torch.cuda.device_count() >= world_size:
        return f"cuda:{local_rank}"
    return device


def init(device: str, timeout_s: float) -> Single:
    """The process group of this rank (Single outside torchrun)."""
    rank, _, world = world_from_env()
    if world <= 1:
        return Single()
    import torch.distributed as dist  # noqa: PLC0415

    dev = torch.device(device)
    backend = "nccl" if dev.type == "cuda" and dev.index is not None and torch.cuda.device_count() >= world else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(dev)
        # Make a stuck NCCL collective raise after the timeout instead of hanging.
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        dist.init_process_group(backend, timeout=timeout)
        cmd = dist.new_group(backend="gloo", timeout=IDLE_TIMEOUT)
    except Exception as e:  # noqa: BLE001
        raise RankFailure(f"data-parallel start ({world} ranks, {backend}): {type(e).__name__}: {e}") from e
    c = Collective(rank, world, backend, timeout_s, cmd)
    c.device = dev
    log.info("data-parallel rank %d of %d (%s, %s)", rank, world, backend, dev)
    return c
