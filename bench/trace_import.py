"""Benchmark: import a synthetic ~1 GB torch.profiler trace (streamed), report time and peak RSS.

    python3 bench/trace_import.py [--gb 1.0] [--path /tmp/mechsim_bench_trace.json]

The trace is generated on the fly (not committed): the committed 125M eager training fixture
(tests/data/traces/train_125m_eager.pt.trace.json.gz, 3 steps) repeated with shifted times,
step numbers and correlation / External ids until the file reaches --gb. The import (parse,
timeline, match against the 125M workload) runs in a child process so its peak RSS
(ru_maxrss) is its own. Target (the trace-import issue): <= 60 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests/data/traces/train_125m_eager.pt.trace.json.gz"
CONFIG = ROOT / "tests/data/traces/llama_ref_125m.config.json"


def _shift(e: dict, dt: float, did: int, step0: int) -> dict:
    e = dict(e)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = e["ts"] + dt
    if e.get("name", "").startswith("ProfilerStep#"):
        e["name"] = f"ProfilerStep#{int(e['name'][13:]) + step0}"
    if "id" in e and isinstance(e["id"], int):
        e["id"] += did
    a = e.get("args")
    if isinstance(a, dict) and ("correlation" in a or "External id" in a):
        a = dict(a)
        for k in ("correlation", "External id"):
            if isinstance(a.get(k), int):
                a[k] += did
        e["args"] = a
    return e


def generate(path: Path, gb: float) -> int:
    """Write the synthetic trace (atomically); returns its size in bytes."""
    doc = json.loads(gzip.open(FIXTURE).read())
    events = [e for e in doc["traceEvents"] if e.get("ph") != "M"]
    t0 = min(e["ts"] for e in events if isinstance(e.get("ts"), (int, float)))
    t1 = max(e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float)))
    tmp = path.with_suffix(".tmp")
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        size, rep, first = 0, 0, True
        while size < gb * 1e9:
            for e in events:
                s = json.dumps(_shift(e, rep * (t1 - t0 + 1000.0), rep * 10_000_000, rep * 3))
                f.write(s if first else ",\n" + s)
                first = False
                size += len(s) + 2
            rep += 1
        f.write("\n]}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path.stat().st_size


def child(path: str) -> None:
    sys.path.insert(0, str(ROOT))
    from mechsim.model import TrainingWorkload, from_hf_config
    from mechsim.validation.trace import load_trace
    from mechsim.validation.trace.report import compare_trace
    t0 = time.perf_counter()
    tr = load_trace(path)
    t1 = time.perf_counter()
    w = TrainingWorkload(model=from_hf_config(CONFIG), mbs=8, seq=1024, precision="amp_bf16", stack="eager")
    r = compare_trace(tr, w, "h200_sxm")
    t2 = time.perf_counter()
    print(json.dumps({"kernels": tr.n, "steps": r.steps, "parse_s": t1 - t0, "match_s": t2 - t1,
                      "matched_fraction": r.match.matched_fraction}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--path", default="/tmp/mechsim_bench_trace.json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.path)
        return 0
    p = Path(a.path)
    if not p.exists() or p.stat().st_size < a.gb * 1e9:
        t = time.perf_counter()
        print(f"generating {a.gb} GB into {p} ...", flush=True)
        print(f"  {generate(p, a.gb) / 1e9:.2f} GB in {time.perf_counter() - t:.0f} s", flush=True)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", "--path", str(p)], capture_output=True, text=True)
    wall = time.perf_counter() - t
    if out.returncode:
        print(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "child failed")
        return 1
    res = json.loads(out.stdout.strip().splitlines()[-1])
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss, cpu = use.ru_maxrss / 1024, use.ru_utime + use.ru_stime
    load = os.getloadavg()[0]
    print(f"{p.stat().st_size / 1e9:.2f} GB: wall {wall:.1f} s (parse {res['parse_s']:.1f} s, match {res['match_s']:.1f} s), "
          f"CPU {cpu:.1f} s, load average {load:.1f} on {os.cpu_count()} cores, "
          f"peak RSS {rss:.0f} MiB, {res['kernels']} kernels, {res['steps']} steps, matched {res['matched_fraction']:.1%}")
    return 0 if wall <= 60 else 1


if __name__ == "__main__":
    sys.exit(main())
