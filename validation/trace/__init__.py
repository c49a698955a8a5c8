"""Validate mechsim on a user's own job: import a torch.profiler (or Nsight Systems) trace,
match its kernels to mechsim's ops, report predicted vs measured per op and per category,
and (opt-in) calibrate efficiencies from it. See docs/trace.md."""

from __future__ import annotations

from .events import Trace, TraceError
from .load import load_trace

__all__ = ["Trace", "TraceError", "load_trace"]
