"""Text and JSON rendering of results for the CLI (unit conversion only, no physics)."""

from __future__ import annotations

import json
import math


def _ms(s: float) -> str:
    return f"{s * 1e3:10.3f}"


def _gib(b: float) -> str:
    return f"{b / 2**30:8.2f}"


def estimate_table(est, top: int = 12) -> str:
    """Human-readable breakdown of an Estimate."""
    lines = [
        f"{est.workload}  on {est.cluster or est.gpu}  [{est.stack}]",
        f"step time        {est.step_time_s * 1e3:.3f} ms   ({est.tokens_per_s:,.0f} tokens/s)",
        f"MFU / HFU        {est.mfu * 100:.1f} % / {est.hfu * 100:.1f} %  (vs dense {est.peak_dtype} peak)",
        f"GPU busy         {est.gpu_busy_s * 1e3:.3f} ms; launch overhead {est.launch_overhead_s * 1e3:.3f} ms",
        _band(est.error_band),
        *_host_lines(est.error_band),
        *([f"data files       {', '.join(est.error_band.data_files)}"] if est.error_band.data_files else []),
        *([f"SM clock         {est.sm_clock_hz / 1e6:,.0f} MHz sustained under the power cap (sim/power.py)"]
          if est.sm_clock_hz else []),
        *(["exposed comm     " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in est.exposed_comm.items() if v > 0)]
          if est.gpus > 1 else []),
        "",
        "by category                    ms      share",
    ]
    for cat, t in sorted(est.by_category.items(), key=lambda kv: -kv[1]):
        if t > 0:
            lines.append(f"  {cat:<22} {_ms(t)}  {t / est.step_time_s * 100:6.1f} %")
    lines += ["", f"top {top} ops                       phase count      ms   bound    eff  AI(F/B)"]
    for o in sorted(est.ops, key=lambda o: -o.time_s)[:top]:
        ai = "inf" if math.isinf(o.intensity) else f"{o.intensity:.0f}"
        lines.append(f"  {o.name[:30]:<30} {o.phase:<5} {o.count:>5} {_ms(o.time_s)} {o.bound:<8}"
                     f" {o.efficiency:5.2f} {ai:>7}")
    lines += ["", _memory(est.memory)]
    return "\n".join(lines)


def _band(b) -> str:
    if b.status != "validated":
        return f"error band       unvalidated ({b.note})"
    return (f"error band       ±{b.mape * 100:.1f} % MAPE (max {b.max_error * 100:.1f} %), "
            f"held-out {b.kind} on {b.reference_gpu}{' — ' + b.note if b.note else ''}")


def _memory(m) -> str:
    rows = [f"memory (GiB)   {_gib(m.total)} of {_gib(m.capacity)}  "
            f"{'fits' if m.fits else 'DOES NOT FIT: short by ' + _gib(-m.headroom).strip() + ' GiB'}"]
    rows += [f"  {k:<20} {_gib(v)}" for k, v in m.components.items()]
    return "\n".join(rows)


def estimate_json(est) -> str:
    return json.dumps(est.to_dict(), indent=2, default=float)


def op_line(o) -> str:
    return (f"{o.name}: {o.time_s * 1e6:.2f} us  bound={o.bound}  efficiency={o.efficiency:.3f}  "
            f"achieved {o.achieved_flops_per_s / 1e12:.1f} TFLOP/s, {o.achieved_bytes_per_s / 1e12:.2f} TB/s  "
            f"(compute {o.compute_s * 1e6:.2f} us, memory {o.memory_s * 1e6:.2f} us, fixed {o.fixed_s * 1e6:.2f} us)")


def hw_list() -> str:
    from .hwdb import get_gpu, get_nic, get_system, list_gpus, list_nics, list_systems
    rows = ["GPUs:"] + [f"  {k:<16} {get_gpu(k).name}" for k in list_gpus()]
    rows += ["systems:"] + [f"  {k:<16} {get_system(k).name}" for k in list_systems()]
    rows += ["NICs / fabrics:"] + [f"  {k:<22} {get_nic(k).name}" for k in list_nics()]
    from .hwdb import get_cpu, list_cpus
    rows += ["host CPUs:"] + [f"  {k:<16} {get_cpu(k).name}" for k in list_cpus()]
    return "\n".join(rows)


def _host_lines(b) -> list[str]:
    """The host the estimate assumed and, for a host-bound step without a probe, its band (sim/host.py)."""
    from .sim.host import host_line
    line = host_line(b)
    return ([f"host             {b.host}"] if getattr(b, "host", "") else []) + ([f"                 {line}"] if line else [])


def no_plan_reason(res, cluster) -> str:
    """'no plan fits, because ...' for an empty plan search: the binding reason from its counts."""
    c, gpus = res.counts, res.gpus
    if c.enumerated == 0:
        return (f"no plan fits, because no plan of the search space has degrees whose product is the {gpus} GPUs "
                f"(space: {res.space}); widen it (--tp, --max-cp, --max-vp) or change --nodes")
    parts = []
    if c.not_fitting:
        parts.append(f"{c.not_fitting} of {c.enumerated} plans need more memory than one "
                     f"{cluster.sys.gpu.key} holds (even with full recompute and ZeRO)")
    top = next(iter(c.invalid.items()), None)
    if top:
        parts.append(f"{c.invalid_total} are invalid (most often: {top[0]}, x{top[1]})")
    why = "; ".join(parts) or f"{c.enumerated} plans were enumerated and none estimated"
    return f"no plan fits, because {why}; try more --nodes, a smaller --gbs or --seq"
