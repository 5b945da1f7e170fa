"""The HTTP server of the trainer protocol (trainer/PROTOCOL.md), standard library only.

TrainerService.handle(method, path, headers, body) is the whole protocol as
one function (tests call it directly); make_http_server wraps it in a
ThreadingHTTPServer. Every call that touches the model holds one lock, so
updates are applied one at a time and never overlap a sample.
"""

import collections
import contextlib
import hashlib
import hmac
import json
import logging
import os
import shutil
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, Mapping, Optional, Tuple

import torch

from . import protocol
from .distributed import RankFailure
from .engine import IMPLEMENTATION, ArgumentError, CheckpointError, Engine, NumericError, read_meta
from .protocol import ProtocolError, invalid

log = logging.getLogger("lora_trainer")

MAX_BODY_BYTES = 64 << 20
PROTOCOL_VERSION = 1


def is_oom(err: BaseException) -> bool:
    """CUDA or CPU-allocator out-of-memory, on PyTorch 1.13 and 2.x. The CPU
    allocator raises RuntimeError("... DefaultCPUAllocator: not enough memory: ...")."""
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(err, oom_type):
        return True
    if isinstance(err, MemoryError):
        return True
    msg = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in msg or "not enough memory" in msg)


class StepLog:
    """Results of the last `size` applied mutating calls, keyed by step_id."""

    def __init__(self, size: int = 1024):
        self.size = size
        self._entries: "collections.OrderedDict[str, Tuple[str, str, Dict]]" = collections.OrderedDict()

    def lookup(self, step_id: str, endpoint: str, digest: str) -> Optional[Dict]:
        hit = self._entries.get(step_id)
        if hit is None:
            return None
        ep, dg, resp = hit
        if ep != endpoint:
            raise ProtocolError("conflict", 409, f"step_id {step_id!r} was used for {ep}, not {endpoint}")
        if dg != digest:
            raise ProtocolError("conflict", 409, f"step_id {step_id!r} was used for a different {endpoint} request")
        return dict(resp, replayed=True)

    def remember(self, step_id: str, endpoint: str, digest: str, resp: Dict) -> None:
        self._entries[step_id] = (endpoint, digest, resp)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)


def canonical_digest(body: Dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")).hexdigest()


def _dir_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


class CheckpointStore:
    """Named checkpoints under one directory, written atomically.

    A checkpoint is written into a hidden temporary directory and renamed into
    place, so a reader sees either the old checkpoint or the new one, never a
    half-written one. A delete renames the checkpoint to a hidden name before
    removing it, so it disappears at once and entirely. Hidden entries are
    never listed.
    """

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        # The directory is made by the first save, not here: himes launches
        # a trainer with --checkpoint-dir inside a run directory that does
        # not exist yet (it is created after the trainer is ready).
        if not os.path.isdir(self.root):
            return
        # Checkpoints whose delete or replacement was interrupted after the
        # rename: already invisible, only taking space.
        for name in os.listdir(self.root):
            if name.startswith((".del-", ".old-")):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def save(self, name: str, write: Callable[[str], None]) -> int:
        os.makedirs(self.root, exist_ok=True)
        tmp = os.path.join(self.root, f".tmp-{name}-{uuid.uuid4().hex}")
        os.makedirs(tmp)
        try:
            write(tmp)
            _fsync_tree(tmp)
            final = self.path(name)
            old = None
            if os.path.exists(final):
                old = os.path.join(self.root, f".old-{name}-{uuid.uuid4().hex}")
                os.replace(final, old)
            os.replace(tmp, final)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if old:
            shutil.rmtree(old, ignore_errors=True)
        return _dir_size(final)

    def delete(self, name: str) -> bool:
        """Remove checkpoint `name`; False if nothing was stored under it.

        Whatever is stored under the name goes, also an unreadable checkpoint
        that `list` skips and `load` refuses.
        """
        final = self.path(name)
        if not os.path.lexists(final):
            return False
        trash = os.path.join(self.root, f".del-{name}-{uuid.uuid4().hex}")
        os.replace(final, trash)  # atomic: the name is gone in one step
        _fsync_dir(self.root)
        if os.path.isdir(trash) and not os.path.islink(trash):
            shutil.rmtree(trash, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(trash)
        return True

    def meta(self, name: str) -> Dict:
        return read_meta(self.path(name))

    def exists(self, name: str) -> bool:
        return os.path.isfile(os.path.join(self.path(name), "state.json"))

    def list(self):
        out = []
        if not os.path.isdir(self.root):
            return out  # nothing saved yet
        for name in sorted(os.listdir(self.root)):
            if name.startswith(".") or not self.exists(name):
                continue
            # Listing does not take the lock: a concurrent delete or
            # replacement may move the checkpoint away between these steps.
            try:
                with open(os.path.join(self.path(name), "state.json"), encoding="utf-8") as f:
                    meta = json.load(f)
                size = _dir_size(self.path(name))
            except FileNotFoundError:
                continue
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue  # unreadable metadata: load refuses it as corrupt
            out.append(
                {
                    "name": name,
                    "policy_version": meta["policy_version"],
                    "created_at": meta["created_at"],
                    "size_bytes": size,
                    "run_id": meta.get("run_id", ""),
                }
            )
        return out


def _fsync_tree(root: str) -> None:
    for d, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(d)


def _fsync_dir(d: str) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class TrainerService:
    """The protocol: routes, auth, idempotency, validation and errors around an Engine."""

    def __init__(self, engine: Engine, checkpoints: CheckpointStore, token: str = "", step_log_size: int = 1024):
        self.engine = engine
        self.checkpoints = checkpoints
        self.token = token
        # Called once when a data-parallel rank failed: the server must stop (cli exits non-zero).
        self.on_fatal: Callable[[str], None] = lambda msg: None
        self.fatal = ""
        self._fatal_once = threading.Lock()
        self._fatal_stopped = False
        self.steps = StepLog(step_log_size)
        self.lock = threading.Lock()
        self.routes: Dict[str, Tuple[str, Callable[[Dict], Dict]]] = {
            "/v1/info": ("GET", self._info),
            "/v1/checkpoints": ("GET", self._list),
            "/v1/sample": ("POST", self._sample),
            "/v1/logprobs": ("POST", self._logprobs),
            "/v1/sft_step": ("POST", self._sft),
            "/v1/grpo_step": ("POST", self._grpo),
            "/v1/save": ("POST", self._save),
            "/v1/load": ("POST", self._load),
            "/v1/delete": ("POST", self._delete),
        }
        self.mutating = {"/v1/sft_step", "/v1/grpo_step", "/v1/save", "/v1/load", "/v1/delete"}
        # Calls that take expected_policy_version (PROTOCOL.md, "Policy version").
        self.preconditioned = {"/v1/sample", "/v1/sft_step", "/v1/grpo_step", "/v1/save"}

    def stop_fatal(self) -> None:
        """After a data-parallel failure: stop serving (once)."""
        with self._fatal_once:
            if self._fatal_stopped:
                return
            self._fatal_stopped = True
        self.on_fatal(self.fatal)

    # --- entry point

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Tuple[int, Dict]:
        try:
            return 200, self._dispatch(method, path, headers, body)
        except ProtocolError as e:
            return e.status, e.body()
        except ArgumentError as e:
            return 400, invalid(str(e)).body()
        except NumericError as e:
            return 500, ProtocolError("internal", 500, str(e)).body()
        except CheckpointError as e:
            return 500, ProtocolError("checkpoint_corrupt", 500, f"{e}; the policy is unchanged").body()
        except RankFailure as e:
            msg = f"{path}: {e}; the server stops"
            log.error("%s", msg)
            if not self.fatal:
                self.fatal = msg  # the HTTP handler stops the server once this answer is sent
            return 500, ProtocolError("internal", 500, msg).body()
        except Exception as e:  # noqa: BLE001 - every failure must become a JSON error
            if is_oom(e):
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                log.warning("%s: out of memory: %s", path, e)
                return 507, ProtocolError("oom", 507, f"{path}: out of memory ({e}); nothing was applied, split the batch").body()
            log.exception("%s failed", path)
            return 500, ProtocolError("internal", 500, f"{path}: {type(e).__name__}: {e}").body()

    def authorized(self, headers: Mapping[str, str]) -> bool:
        if not self.token:
            return True
        auth = headers.get("Authorization") or headers.get("authorization") or ""
        return hmac.compare_digest(auth.encode("utf-8"), f"Bearer {self.token}".encode("utf-8"))

    def _dispatch(self, method, path, headers, body) -> Dict:
        if self.fatal:
            raise ProtocolError("internal", 500, f"the server is stopping: {self.fatal}")
        if not self.authorized(headers):
            raise ProtocolError("unauthorized", 401, "missing or wrong bearer token")
        route = self.routes.get(path)
        if route is None:
            raise ProtocolError("not_found", 404, f"unknown path {path}")
        want, fn = route
        if method != want:
            raise invalid(f"{path}: method {method} not allowed, use {want}", status=405)
        req: Dict = {}
        if method == "POST":
            try:
                req = json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise invalid(f"body: not valid JSON: {e}") from e
            req = protocol.obj(req, "")
        if path not in self.mutating:
            if method == "GET":
                return fn(req)
            with self.lock:
                return fn(req)
        sid = protocol.step_id(req)
        digest = canonical_digest(req)
        # A repeat of a call still being applied waits here, then replays.
        with self.lock:
            stored = self.steps.lookup(sid, path, digest)
            if stored is not None:
                log.info("%s step_id=%s replayed", path, sid)
                return stored
            # After the lookup: a retry of an applied call replays although its
            # first attempt moved the version.
            if path in self.preconditioned:
                protocol.check_expected(req, self.engine.policy_version)
            resp = fn(req)
            resp["replayed"] = False
            self.steps.remember(sid, path, digest, resp)
            return dict(resp)

    # --- endpoints

    def _info(self, _req) -> Dict:
        e = self.engine
        info = {
            "protocol_version": PROTOCOL_VERSION,
            "implementation": IMPLEMENTATION,
            "base_model": e.backend.base_model,
            "adapter": e.backend.adapter_info(),
            "policy_version": e.policy_version,
            "reference": "adapter_disabled",
            "loss_types": list(protocol.LOSS_TYPES),
            "kl_estimators": list(protocol.KL_ESTIMATORS),
            "capabilities": {"top_p": True, "stop": True, "entropy": True, "logprobs": True, "auth": bool(self.token),
                             "delete": True, "dual_clip": True, "weight_decay": True, "optimizer_reset": True},
            "limits": e.limits.as_dict(),
            "token_kind": "tokenizer",
            "world_size": e.dist.world_size,
            # Who draws sample's tokens; their logprobs are the trainer's either way.
            "sampler": getattr(e.generator, "name", "transformers"),
        }
        # A decisions policy (tagger.py) says what differs; objects are merged.
        for k, v in getattr(e, "info_overrides", dict)().items():
            info[k] = {**info[k], **v} if isinstance(v, dict) and isinstance(info.get(k), dict) else v
        return info

    def _sample(self, req) -> Dict:
        r = protocol.parse_sample(req, self.engine.limits)
        protocol.check_expected(req, self.engine.policy_version)
        ids = [self.engine.encode_prompt(p, f"prompts[{k}]") for k, p in enumerate(r["prompts"])]
        samples = self.engine.sample(ids, r["n"], r["temperature"], r["top_p"], r["max_tokens"], r["stop"], r["seed"])
        return {"samples": samples, "policy_version": self.engine.policy_version}

    def _logprobs(self, req) -> Dict:
        r = protocol.parse_logprobs(req, self.engine.tok.vocab_size, self.engine.limits)
        ids = [self.engine.encode_prompt(it["prompt"], f"items[{k}].prompt") for k, it in enumerate(r["items"])]
        lps = self.engine.logprobs(ids, [it["token_ids"] for it in r["items"]], r["temperature"]) if ids else []
        return {"logprobs": lps, "policy_version": self.engine.policy_version}

    def _sft(self, req) -> Dict:
        r = protocol.parse_sft(req, self.engine.limits)
        examples = [
            (self.engine.encode_prompt(ex["prompt"], f"examples[{k}].prompt"), self.engine.tok.encode(ex["completion"]))
            for k, ex in enumerate(r["examples"])
        ]
        self.engine.dist.announce("/v1/sft_step", req)  # after validation: the other ranks apply it too
        out = self.engine.sft_step(examples, r["learning_rate"], r["epochs"], r["max_grad_norm"], r["weight_decay"])
        out["policy_version"] = self.engine.policy_version
        return out

    def _grpo(self, req) -> Dict:
        r = protocol.parse_grpo(req, self.engine.limits, self.engine.tok.vocab_size)
        samples = [
            dict(s, prompt_ids=self.engine.encode_prompt(s["prompt"], f"samples[{k}].prompt"))
            for k, s in enumerate(r["samples"])
        ]
        self.engine.dist.announce("/v1/grpo_step", req)
        out = self.engine.grpo_step(samples, r["loss"], reset_optimizer=r["reset_optimizer"])
        out["policy_version"] = self.engine.policy_version
        return out

    def _save(self, req) -> Dict:
        name = protocol.checkpoint_name(req)
        run_id = protocol.run_id(req, "run_id")
        size = self.checkpoints.save(name, lambda d: self.engine.save_to(d, run_id))
        log.info("saved checkpoint %s (policy_version %d, %d bytes)", name, self.engine.policy_version, size)
        return {"name": name, "policy_version": self.engine.policy_version, "size_bytes": size}

    def _load(self, req) -> Dict:
        name = protocol.checkpoint_name(req)
        expected_run = protocol.run_id(req, "expected_run_id")
        if not self.checkpoints.exists(name):
            raise ProtocolError("not_found", 404, f"name: no checkpoint {name!r} in {self.checkpoints.root}")
        saved_run = self.checkpoints.meta(name).get("run_id") or ""
        if expected_run and saved_run and saved_run != expected_run:
            raise ProtocolError("run_mismatch", 412, f"checkpoint {name!r} was saved by run {saved_run!r}, not {expected_run!r} "
                                                     "(expected_run_id); the policy is unchanged")
        path = self.checkpoints.path(name)
        version = self.engine.load_from(path)
        if self.engine.dist.world_size > 1:
            # Loaded here first: a refused checkpoint changes no rank.
            self.engine.dist.announce("/v1/load", path)
            self.engine.dist.agree(True, f"load {name!r}")
        log.info("loaded checkpoint %s (policy_version %d, run %s)", name, version, saved_run or "-")
        return {"name": name, "policy_version": version, "run_id": saved_run}

    def _delete(self, req) -> Dict:
        # Never touches the engine: the policy and its version stay as they are.
        name = protocol.checkpoint_name(req)
        deleted = self.checkpoints.delete(name)
        log.info("delete checkpoint %s: %s", name, "deleted" if deleted else "no such checkpoint")
        return {"name": name, "deleted": deleted, "policy_version": self.engine.policy_version}

    def _list(self, _req) -> Dict:
        return {"checkpoints": self.checkpoints.list(), "policy_version": self.engine.policy_version}


def serve_worker(service: TrainerService) -> int:
    """A data-parallel rank > 0: apply what rank 0 announces until it says stop.
    Returns the exit status: 0 after stop, 1 after a failed collective."""
    e = service.engine
    d = e.dist
    while True:
        try:
            path, payload = d.receive()
        except RankFailure as err:
            log.error("rank %d: %s", d.rank, err)
            return 1
        if path == "stop":
            return 0
        try:
            if path == "/v1/sft_step":
                service._sft(payload)
            elif path == "/v1/grpo_step":
                service._grpo(payload)
            elif path == "/v1/load":
                ok = True
                try:
                    e.load_from(payload)
                except Exception as err:  # noqa: BLE001 - rank 0 is told, and stops
                    log.error("rank %d: load %s: %s", d.rank, payload, err)
                    ok = False
                d.agree(ok, f"load {payload!r}")
            else:
                log.error("rank %d: unknown command %r", d.rank, path)
                return 1
        except RankFailure as err:
            log.error("rank %d: %s", d.rank, err)
            return 1
        except Exception as err:  # noqa: BLE001 - rank 0 fails the same way on the same request
            log.warning("rank %d: %s failed as on rank 0: %s", d.rank, path, err)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every response has a Content-Length
    service: TrainerService  # set by make_http_server
    # Seconds a client may take for a request's line and headers, and for its
    # body (also the socket's inactivity timeout); set by make_http_server.
    read_timeout: float = 60.0
    timeout = read_timeout  # BaseHTTPRequestHandler.setup applies it to the socket

    def handle_one_request(self):
        # The socket timeout bounds each read; this timer bounds the request
        # line and headers as a whole (a client trickling header bytes would
        # otherwise hold the connection and its thread indefinitely).
        self._headers_done = False
        timer = threading.Timer(self.read_timeout, self._expire_headers)
        timer.daemon = True
        self._header_timer = timer
        timer.start()
        try:
            super().handle_one_request()
        finally:
            timer.cancel()

    def _expire_headers(self):
        if not self._headers_done:
            log.info("closing a connection from %s: no complete request headers in %.0fs", self.client_address[0], self.read_timeout)
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def _read_body(self, n: int) -> Optional[bytes]:
        """The body, or None when the client took longer than read_timeout."""
        deadline = time.monotonic() + self.read_timeout
        parts, got = [], 0
        try:
            while got < n:
                if time.monotonic() > deadline:
                    return None
                chunk = self.rfile.read1(min(n - got, 1 << 16))
                if not chunk:
                    return None
                parts.append(chunk)
                got += len(chunk)
        except (TimeoutError, OSError):
            return None
        return b"".join(parts)

    def _serve(self, method: str) -> None:
        self._headers_done = True
        self._header_timer.cancel()
        start = time.monotonic()
        path = self.path.split("?", 1)[0]
        length = self.headers.get("Content-Length")
        body = b""
        status: int
        resp: Dict
        try:
            n = int(length) if length else 0
        except ValueError:
            n = -1
        if not self.service.authorized(self.headers):
            # Before a byte of the body is read: an unauthenticated client
            # cannot make the server buffer 64 MiB.
            status, resp = 401, ProtocolError("unauthorized", 401, "missing or wrong bearer token").body()
            self.close_connection = n != 0
        elif n < 0:
            status, resp = 400, invalid("Content-Length: not a valid length").body()
            self.close_connection = True
        elif n > MAX_BODY_BYTES:
            status, resp = 413, invalid(f"body: {n} bytes, at most {MAX_BODY_BYTES}", status=413).body()
            self.close_connection = True  # the unread body cannot be skipped safely
        else:
            raw = self._read_body(n) if n else b""
            if raw is None:
                status, resp = 408, invalid(f"body: not received within {self.read_timeout:g}s", status=408).body()
                self.close_connection = True
            else:
                status, resp = self.service.handle(method, path, self.headers, raw)
        try:
            data = json.dumps(resp, allow_nan=False).encode("utf-8")
        except ValueError as e:  # NaN or Inf: never sent (PROTOCOL.md)
            status = 500
            data = json.dumps(ProtocolError("internal", 500, f"{path}: non-finite number in the response: {e}").body()).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        log.info("%s %s %d %.3fs", method, path, status, time.monotonic() - start)
        if self.service.fatal:
            self.wfile.flush()
            self.service.stop_fatal()

    def do_GET(self):  # noqa: N802 - http.server's naming
        self._serve("GET")

    def do_POST(self):  # noqa: N802
        self._serve("POST")

    def do_PUT(self):  # noqa: N802
        self._serve("PUT")

    def do_DELETE(self):  # noqa: N802
        self._serve("DELETE")

    def log_message(self, fmt, *args):  # requests are logged once, in _serve
        log.debug(fmt, *args)


def make_http_server(service: TrainerService, host: str = "127.0.0.1", port: int = 0, read_timeout: float = 60.0) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"service": service, "read_timeout": read_timeout, "timeout": read_timeout})
    srv = ThreadingHTTPServer((host, port), handler)
    srv.daemon_threads = True
    return srv
