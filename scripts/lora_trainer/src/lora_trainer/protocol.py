"""Request validation for the trainer protocol (trainer/PROTOCOL.md).

Each parse_* function turns a decoded JSON body into plain values with the
documented defaults applied, or raises ProtocolError naming the offending
field, e.g. "samples[3].old_logprobs: length 5, want 7 (len(token_ids))".
"""

import math
import re
from typing import Any, Dict, List, Optional

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")
KL_ESTIMATORS = ("k3", "low_var_kl")
ROLES = ("system", "user", "assistant")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_STEP_ID_BYTES = 256


class ProtocolError(Exception):
    """An error answered as {"error": {"code", "message", "retryable"}}."""

    def __init__(self, code: str, status: int, message: str, retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.retryable = retryable

    def body(self) -> Dict:
        return {"error": {"code": self.code, "message": self.message, "retryable": self.retryable}}


def invalid(message: str, status: int = 400) -> ProtocolError:
    return ProtocolError("invalid_argument", status, message)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def obj(v: Any, path: str) -> Dict:
    if not isinstance(v, dict):
        raise invalid(f"{path or 'body'}: want a JSON object, got {type(v).__name__}")
    return v


def lst(d: Dict, key: str, path: str, required: bool = False) -> List:
    v = d.get(key)
    if v is None:
        if required:
            raise invalid(f"{_join(path, key)}: is required")
        return []
    if not isinstance(v, list):
        raise invalid(f"{_join(path, key)}: want a list, got {type(v).__name__}")
    return v


def integer(d: Dict, key: str, path: str, default: int = 0, minimum: Optional[int] = None) -> int:
    v = d.get(key)
    if v is None:
        return default
    # JSON has one number type; accept 3.0 but not 3.5 or true.
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise invalid(f"{_join(path, key)}: want an integer, got {v!r}")
    v = int(v)
    if minimum is not None and v < minimum:
        raise invalid(f"{_join(path, key)}: must be >= {minimum}, got {v}")
    return v


def number(d: Dict, key: str, path: str, default: float = 0.0) -> float:
    v = d.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise invalid(f"{_join(path, key)}: want a finite number, got {v!r}")
    return float(v)


def boolean(d: Dict, key: str, path: str, default: bool = False) -> bool:
    v = d.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise invalid(f"{_join(path, key)}: want true or false, got {v!r}")
    return v


def string(d: Dict, key: str, path: str, required: bool = False) -> str:
    v = d.get(key)
    if v is None or (required and v == ""):
        if required:
            raise invalid(f"{_join(path, key)}: is required")
        return ""
    if not isinstance(v, str):
        raise invalid(f"{_join(path, key)}: want a string, got {type(v).__name__}")
    return v


def step_id(d: Dict) -> str:
    s = string(d, "step_id", "", required=True)
    if len(s.encode("utf-8")) > MAX_STEP_ID_BYTES:
        raise invalid(f"step_id: {len(s.encode('utf-8'))} bytes, at most {MAX_STEP_ID_BYTES}")
    return s


def expected_policy_version(d: Dict) -> Optional[int]:
    """The version precondition; None when absent (0 is a value: a fresh policy)."""
    if d.get("expected_policy_version") is None:
        return None
    return integer(d, "expected_policy_version", "", minimum=0)


def check_expected(d: Dict, policy_version: int) -> None:
    """Refuse (version_mismatch) a call whose expected_policy_version is not the policy's."""
    want = expected_policy_version(d)
    if want is not None and want != policy_version:
        raise ProtocolError(
            "version_mismatch",
            412,
            f"expected_policy_version {want}, but the policy is at version {policy_version} "
            "(the trainer restarted, or another client changed the policy); nothing was applied",
        )


def run_id(d: Dict, key: str) -> str:
    s = string(d, key, "")
    if len(s.encode("utf-8")) > MAX_STEP_ID_BYTES:
        raise invalid(f"{key}: {len(s.encode('utf-8'))} bytes, at most {MAX_STEP_ID_BYTES}")
    return s


def checkpoint_name(d: Dict) -> str:
    name = string(d, "name", "", required=True)
    if not NAME_RE.fullmatch(name):
        raise invalid(f"name: {name!r} does not match [A-Za-z0-9][A-Za-z0-9._-]{{0,127}}")
    return name


def _messages(v: Any, path: str) -> List[Dict[str, str]]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise invalid(f"{path}: want a list, got {type(v).__name__}")
    out = []
    for k, m in enumerate(v):
        p = f"{path}[{k}]"
        m = obj(m, p)
        role = string(m, "role", p, required=True)
        if role not in ROLES:
            raise invalid(f"{p}.role: want system, user or assistant, got {role!r}")
        out.append({"role": role, "content": string(m, "content", p)})
    return out


def prompt(v: Any, path: str) -> Dict:
    d = obj(v, path)
    out: Dict[str, Any] = {"text": string(d, "text", path), "messages": _messages(d.get("messages"), _join(path, "messages"))}
    if d.get("dialogue") is not None:
        dp = _join(path, "dialogue")
        dd = obj(d["dialogue"], dp)
        out["dialogue"] = {"history": _messages(dd.get("history"), _join(dp, "history")), "question": string(dd, "question", dp)}
    return out


def _limit(count: int, limit: int, what: str, field: str) -> None:
    if limit and count > limit:
        raise invalid(f"{field}: {count} {what}, the limit is {limit} (info.limits)")


def token_ids(v: Any, path: str, vocab_size: int) -> List[int]:
    if not isinstance(v, list):
        raise invalid(f"{path}: want a list of token ids, got {type(v).__name__}")
    for k, t in enumerate(v):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size:
            raise invalid(f"{path}[{k}]: {t!r} is not a token id in [0, {vocab_size})")
    return v


def parse_sample(body: Dict, limits) -> Dict:
    prompts = lst(body, "prompts", "", required=True)
    if not prompts:
        raise invalid("prompts: at least one prompt is required")
    _limit(len(prompts), limits.max_prompts, "prompts", "prompts")
    n = integer(body, "n", "", 0, minimum=0) or 1
    _limit(n, limits.max_n, "samples per prompt", "n")
    temperature = number(body, "temperature", "")
    if temperature < 0:
        raise invalid(f"temperature: must be >= 0, got {temperature}")
    top_p = number(body, "top_p", "") or 1.0
    if not 0 < top_p <= 1:
        raise invalid(f"top_p: must be in (0, 1], got {top_p}")
    max_tokens = integer(body, "max_tokens", "", 0, minimum=0)
    _limit(max_tokens, limits.max_tokens, "tokens", "max_tokens")
    stop = lst(body, "stop", "")
    for k, s in enumerate(stop):
        if not isinstance(s, str):
            raise invalid(f"stop[{k}]: want a string, got {type(s).__name__}")
    seed = integer(body, "seed", "")
    return {
        "prompts": [prompt(p, f"prompts[{k}]") for k, p in enumerate(prompts)],
        "n": n,
        "temperature": temperature,
        "top_p": top_p,
        "max_tokens": max_tokens,
        "stop": [s for s in stop if s],
        "seed": seed,
    }


def parse_logprobs(body: Dict, vocab_size: int, limits=None) -> Dict:
    items = lst(body, "items", "", required=True)
    if limits is not None:
        _limit(len(items), limits.max_batch, "items", "items")
    out = []
    for k, it in enumerate(items):
        p = f"items[{k}]"
        it = obj(it, p)
        if it.get("prompt") is None:
            raise invalid(f"{p}.prompt: is required")
        out.append({"prompt": prompt(it["prompt"], f"{p}.prompt"), "token_ids": token_ids(it.get("token_ids") or [], f"{p}.token_ids", vocab_size)})
    temperature = number(body, "temperature", "") or 1.0
    if temperature <= 0:
        raise invalid(f"temperature: must be > 0, got {temperature}")
    return {"items": out, "temperature": temperature}


def _learning_rate(d: Dict, path: str) -> float:
    lr = number(d, "learning_rate", path)
    if lr <= 0:
        raise invalid(f"{_join(path, 'learning_rate')}: is required and must be > 0, got {lr}")
    return lr


def _max_grad_norm(d: Dict, path: str) -> float:
    v = number(d, "max_grad_norm", path)
    if v < 0:
        raise invalid(f"{_join(path, 'max_grad_norm')}: must be >= 0, got {v}")
    return v


def _weight_decay(d: Dict, path: str) -> Optional[float]:
    """None when absent or null (the endpoint's default); a present value, 0 included, as given."""
    if d.get("weight_decay") is None:
        return None
    v = number(d, "weight_decay", path)
    if v < 0:
        raise invalid(f"{_join(path, 'weight_decay')}: must be >= 0, got {v}")
    return v


def parse_sft(body: Dict, limits) -> Dict:
    examples = lst(body, "examples", "", required=True)
    if not examples:
        raise invalid("examples: at least one example is required")
    _limit(len(examples), limits.max_batch, "examples", "examples")
    out = []
    for k, ex in enumerate(examples):
        p = f"examples[{k}]"
        ex = obj(ex, p)
        if ex.get("prompt") is None:
            raise invalid(f"{p}.prompt: is required")
        out.append({"prompt": prompt(ex["prompt"], f"{p}.prompt"), "completion": string(ex, "completion", p)})
    return {
        "examples": out,
        "learning_rate": _learning_rate(body, ""),
        "epochs": integer(body, "epochs", "", 0, minimum=0) or 1,
        "max_grad_norm": _max_grad_norm(body, ""),
        "weight_decay": _weight_decay(body, ""),
    }


def loss_defaults() -> Dict[str, Any]:
    """What an absent or JSON-null field of grpo_step's `loss` means
    (PROTOCOL.md, LossConfig): the Go table rlcore.DefaultLoss, which
    tests/test_protocol.py compares this with (rlcore/testdata/loss_defaults.json).
    A field that is present is taken literally, 0 included, and validated:
    clip_low 0 is the tightest lower clip (every ratio below 1 is clipped),
    not "no lower clipping"; clip_high 0 likewise clips every ratio above 1.

    Three defaults depend on something else and are written as None, resolved
    where that is known: clip_high (= clip_low, in resolve_loss), weight_decay
    (= the endpoint's --weight-decay, by the engine) and max_length (= the
    longest sample of the request, by the engine). learning_rate has no
    default: it is required.
    """
    return {
        "type": "grpo",
        "clip_low": 0.2,
        "clip_high": None,
        "kl_coef": 0.0,
        "mu": 1,
        "max_grad_norm": 1.0,  # a present 0 = no clipping
        "weight_decay": None,
        "max_length": None,
        "temperature": 1.0,
        "clip_ratio_c": 0.0,  # 0 = no dual clip
        "kl_estimator": "k3",
    }


def _loss_field(d: Dict, key: str) -> Any:
    """A present field of the loss object, type-checked and range-checked; None when absent or null."""
    path = f"loss.{key}"
    if d.get(key) is None:
        return None
    if key in ("type", "kl_estimator"):
        v = string(d, key, "loss")
        if key == "type" and v not in LOSS_TYPES:
            raise ProtocolError("unknown_loss_type", 400, f"unknown loss type '{v}'")
        if key == "kl_estimator" and v not in KL_ESTIMATORS:
            raise invalid(f"{path}: must be k3 or low_var_kl, got {v!r}")
        return v
    if key == "mu":
        return integer(d, key, "loss", minimum=1)
    if key == "max_length":
        # 0 is a value with a documented meaning (PROTOCOL.md): the longest
        # sample of the request, as when the field is absent.
        return integer(d, key, "loss", minimum=0) or None
    v = number(d, key, "loss")
    ok, want = {
        "clip_low": (0 <= v < 1, "in [0, 1)"),
        "clip_high": (v >= 0, ">= 0"),
        "kl_coef": (v >= 0, ">= 0"),
        "learning_rate": (v > 0, "> 0"),
        "max_grad_norm": (v >= 0, ">= 0 (0 = no clipping)"),
        "weight_decay": (v >= 0, ">= 0"),
        "temperature": (v > 0, "> 0"),
        "clip_ratio_c": (v == 0 or v > 1, "> 1 (dual-clip PPO) or 0 (none)"),
    }[key]
    if not ok:
        raise invalid(f"{path}: must be {want}, got {v}")
    return v


LOSS_FIELDS = tuple(loss_defaults()) + ("learning_rate",)


def resolve_loss(given: Dict[str, Any]) -> Dict[str, Any]:
    """given (the present fields, already validated) over loss_defaults(), with
    clip_high's default resolved to clip_low."""
    out = loss_defaults()
    out.update({k: v for k, v in given.items() if v is not None})
    if out["clip_high"] is None:
        out["clip_high"] = out["clip_low"]
    if "learning_rate" not in out:
        raise invalid("loss.learning_rate: is required and must be > 0")
    return out


def parse_loss(v: Any) -> Dict:
    """grpo_step's LossConfig with every default applied (see loss_defaults)."""
    d = obj(v, "loss")
    return resolve_loss({k: _loss_field(d, k) for k in LOSS_FIELDS})


def parse_grpo(body: Dict, limits, vocab_size: int) -> Dict:
    if body.get("loss") is None:
        raise invalid("loss: is required")
    loss = parse_loss(body["loss"])
    # The harness sets it on the first grpo_step after SFT: RL starts from a fresh optimizer.
    reset = boolean(body, "reset_optimizer", "")
    samples = lst(body, "samples", "", required=True)
    if not samples:
        raise invalid("samples: at least one sample is required")
    _limit(len(samples), limits.max_batch, "samples", "samples")
    out = []
    for k, s in enumerate(samples):
        p = f"samples[{k}]"
        s = obj(s, p)
        if s.get("prompt") is None:
            raise invalid(f"{p}.prompt: is required")
        ids = token_ids(s.get("token_ids") or [], f"{p}.token_ids", vocab_size)
        old = s.get("old_logprobs") or []
        if not isinstance(old, list):
            raise invalid(f"{p}.old_logprobs: want a list of numbers, got {type(old).__name__}")
        if len(old) != len(ids):
            raise invalid(f"{p}.old_logprobs: length {len(old)}, want {len(ids)} (len(token_ids))")
        for t, x in enumerate(old):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                raise invalid(f"{p}.old_logprobs[{t}]: want a finite number, got {x!r}")
        out.append(
            {
                "prompt": prompt(s["prompt"], f"{p}.prompt"),
                "token_ids": ids,
                "old_logprobs": [float(x) for x in old],
                "advantage": number(s, "advantage", p),
            }
        )
    return {"samples": out, "loss": loss, "reset_optimizer": reset}
