"""Fused elementwise work: torch.compile of the layers' elementwise functions (RMSNorm and the
residual add before it, rotary embedding, the SiLU gate), so each becomes one generated kernel
instead of a handful of eager ones. Opt-in (`compile_elementwise=True` on the executor): every
function compiles once per process (dynamic shapes: one graph for every token count), which costs
tens of seconds, most of it on a CPU; the compiled functions compute the same arithmetic with
reductions possibly reordered (tests/test_torch_fused.py states the tolerance).

A module opts in by naming, in `fusible`, the attributes that hold its pure functions.
"""
from __future__ import annotations

import torch
from torch import nn

_compiled: dict = {}  # original function -> its compiled wrapper, shared by every layer


def compiled(fn):
    if fn not in _compiled:
        _compiled[fn] = torch.compile(fn, dynamic=True, fullgraph=True)
    return _compiled[fn]


def compile_elementwise(model: nn.Module) -> int:
    """Swap every fusible function of `model`'s modules for its compiled version; how many."""
    swapped = 0
    for module in model.modules():
        for attr in getattr(module, "fusible", ()):
            fn = getattr(module, attr)
            if fn not in _compiled.values():
                setattr(module, attr, compiled(fn))
                swapped += 1
    return swapped
