"""Data-parallel trainer against one process, on this machine's CPUs or GPU.

Check 5 of scripts/gpu_check.py alone, for each --micro value: a random
Llama of the given size, one lora_trainer process and N ranks under
torchrun take the same sft_step and grpo_steps (interleaved, one then the
other), and the script prints, per micro-batch size, the largest relative
difference of loss, gradient norm and adapter delta, and each side's
grpo_step seconds. On a CPU, --threads T gives each rank T threads and the
one process N × T, so both sides use the same cores.

    "$(scripts/ci/python-env.sh)" scripts/ddp_bench.py --out /tmp/ddp-bench --hidden 256 --layers 4 --threads 1

It writes OUT/ddp_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_check  # noqa: E402 - the sibling script's model builder and check 5


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for ddp_bench.json and the trainers' logs")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--hidden", type=int, default=256, help="hidden size; heads of 64 dimensions")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="grpo_steps timed on each side, per micro-batch size")
    ap.add_argument("--micro", default="0,1", help="comma-separated --micro-batch-size values to compare (0 = whole request)")
    ap.add_argument("--threads", type=int, default=0, help="threads per rank on a CPU (one process gets ranks × this); 0 = default")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.hidden % 64:
        print(f"ddp_bench: --hidden {a.hidden}: want a multiple of 64", file=sys.stderr)
        return 2
    try:
        micros = [int(x) for x in a.micro.split(",") if x.strip()]
    except ValueError:
        print(f"ddp_bench: --micro {a.micro!r}: want comma-separated integers", file=sys.stderr)
        return 2
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ddp-bench-", dir=out)
    base = gpu_check.build_base_model(os.path.join(work, "base-model"), a)
    results = []
    for m in micros:
        ns = argparse.Namespace(device=a.device, seed=a.seed, max_prompt_tokens=256, ddp_ranks=a.ranks, ddp_steps=a.steps,
                                ddp_tolerance=float("inf"), ddp_micro_batch_size=m, ddp_threads=a.threads)
        t0 = time.perf_counter()
        r = gpu_check.ddp_check(base, ns, os.path.join(work, f"micro-{m}"), out)
        r["wall_s"] = time.perf_counter() - t0
        results.append(r)
    doc = {"model": {"hidden": a.hidden, "layers": a.layers, "vocab_size": a.vocab_size}, "device": a.device,
           "loadavg_end": os.getloadavg(), "results": results}
    tmp = os.path.join(out, "ddp_bench.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, os.path.join(out, "ddp_bench.json"))
    for r in results:
        if not r.get("ok", False) and any("Error" in p for p in r["problems"]):
            print(f"micro {r['micro_batch_size']}: failed: {r['problems']}", file=sys.stderr)
            return 1
        med = r["median_grpo_step_s"]
        by = ", ".join(f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}" for k, v in r["max_relative_difference_by"].items())
        print(f"micro {r['micro_batch_size']}: max relative difference {r['max_relative_difference']:.2e} ({by} of {r['parameters']}); "
              f"grpo_step median 1 process {med['one']:.3f} s, {a.ranks} ranks {med['many']:.3f} s "
              f"(ratio {med['many'] / med['one']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
