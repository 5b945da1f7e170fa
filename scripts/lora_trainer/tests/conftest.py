"""Fixtures shared by the tests: the himes binary, tiny Hugging Face model
directories, and trainer servers on them over real HTTP."""

import json
import os
import shutil
import subprocess
import threading
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def in_ci() -> bool:
    return os.environ.get("CI", "") not in ("", "0", "false")


def need(condition: bool, reason: str) -> None:
    """Skip with the reason outside CI; fail under CI=true, where nothing may be skipped."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"CI=true: {reason}")
    pytest.skip(reason)


def load_script(name: str):
    """scripts/<name>.py as a module (the measurement scripts are not part of
    the package). Registered in sys.modules under its name, where dataclasses
    look their module up, with scripts/ on the path for its sibling imports."""
    import importlib.util  # noqa: PLC0415
    import sys  # noqa: PLC0415

    scripts = os.path.join(ROOT, "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    spec = importlib.util.spec_from_file_location(name, os.path.join(scripts, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def himes_bin(tmp_path_factory) -> str:
    """$HIMES_BIN (scripts/test.d/python.sh builds it), else `go build ./cmd/himes`."""
    path = os.environ.get("HIMES_BIN", "")
    if path:
        need(os.access(path, os.X_OK), f"HIMES_BIN={path} is not an executable")
        return path
    need(shutil.which("go") is not None, "no go on PATH to build himes (or set HIMES_BIN)")
    path = str(tmp_path_factory.mktemp("himes") / "himes")
    subprocess.run(["go", "build", "-o", path, "./cmd/himes"], cwd=ROOT, check=True)
    return path


@pytest.fixture(scope="session")
def hf_available():
    import importlib.util

    need(all(importlib.util.find_spec(m) for m in ("transformers", "peft", "tokenizers")),
         "transformers, peft or tokenizers is not installed (scripts/ci/setup-python.sh installs them)")


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory, hf_available) -> str:
    from .hf_models import build_model

    return build_model(str(tmp_path_factory.mktemp("llama")), "llama", seed=0)


@pytest.fixture(scope="session")
def qwen2_dir(tmp_path_factory, hf_available) -> str:
    from .hf_models import build_model

    return build_model(str(tmp_path_factory.mktemp("qwen2")), "qwen2", seed=1)


class Server:
    """The trainer (cli flags) on an engine in this process, served over HTTP on a free port."""

    def __init__(self, argv, checkpoint_dir: str):
        from lora_trainer.cli import build_engine, parse_args
        from lora_trainer.server import CheckpointStore, TrainerService, make_http_server

        self.args = parse_args(list(argv) + ["--device", "cpu", "--checkpoint-dir", checkpoint_dir, "--threads", "1"])
        self.engine = build_engine(self.args)
        self.service = TrainerService(self.engine, CheckpointStore(checkpoint_dir))
        self.http = make_http_server(self.service, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def call(self, path: str, body=None):
        """(status, decoded JSON) of GET (body None) or POST path."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def ok(self, path: str, body=None):
        status, out = self.call(path, body)
        assert status == 200, (path, out)
        return out

    def close(self):
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def serve(tmp_path):
    """serve(argv) starts a Server; all are closed after the test."""
    started = []

    def start(argv, checkpoint_dir=None):
        s = Server(argv, checkpoint_dir or str(tmp_path / f"ck{len(started)}"))
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()
