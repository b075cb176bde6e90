"""The first Sarathi paper's operator table (arXiv 2308.16369, decode-maximal batching: linear /
attention / total of three batches of LLaMA-13B on one RTX A6000) in the model and the claims: the
`xformers-2023` attention kernel takes two of its batches as inputs, the third is held out, the
shape law carries them (causal pairs for a prefill, KV bytes for a decode), the stand-in stays a
what-if, and inputs are shown, never counted as checks."""
from __future__ import annotations

import pandas as pd
import pytest

from engines.perf import Deployment, PerfModel
from engines.perf.kernels import STACKS, get_attention_kernel
from harness.analysis.sarathi23.claims import claim_table, load_claims, within_count
from harness.analysis.sarathi23.operator_table import batch_ms, cost_ratio, decode_cost_ms
from harness.analysis.sarathi23.report import claims_markdown

PREFILL, DECODE = [[1024, 0]], [[1, 1024]] * 4
HYBRID = [[1021, 0]] + [[1, 1024]] * 3


def perf(attention: str | None = None) -> PerfModel:
    return PerfModel(Deployment.create(model="llama-13b", gpu="rtx-a6000", stack="sarathi-2023", attention_kernel=attention))


def test_the_stack_prices_attention_from_the_papers_table():
    """The two input batches come out at the table's attention times; the held-out one within 10 %."""
    assert STACKS["sarathi-2023"].attention == "xformers-2023"
    p = perf()
    assert p.kernels.attention.name == "xformers-2023"
    assert batch_ms(p, PREFILL, "attention") == pytest.approx(10.0, rel=1e-3)
    assert batch_ms(p, DECODE, "attention") == pytest.approx(5.68, rel=1e-3)
    assert batch_ms(p, HYBRID, "attention") == pytest.approx(15.2, rel=0.10)
    # the stand-in, now a what-if only: 57 % above the table's prefill, 32 % above the held-out batch
    stand_in = perf("sarathi-2024")
    assert batch_ms(stand_in, PREFILL, "attention") > 1.5 * 10.0 and batch_ms(stand_in, HYBRID, "attention") > 1.3 * 15.2


def test_the_shape_law_carries_the_inputs():
    """Prefill: causal (query, key) pairs at one rate; decode: KV bytes at one rate; no per-call cost."""
    k = get_attention_kernel("xformers-2023")
    assert k.causal_flops and k.prefill_fixed_s == 0 == k.decode_fixed_s and k.decode_split is None
    p = perf()
    pairs = (2048 * 2049) / (1024 * 1025)
    assert batch_ms(p, [[2048, 0]], "attention") / batch_ms(p, PREFILL, "attention") == pytest.approx(pairs, rel=1e-3)
    kv = (8 * (2048 + 1) + 8) / (4 * (1024 + 1) + 4)  # KV read + the query's Q/O, per token of KV
    assert batch_ms(p, [[1, 2048]] * 8, "attention") / batch_ms(p, DECODE, "attention") == pytest.approx(kv, rel=1e-3)


def test_the_decode_call_what_if_keeps_the_inputs_within_the_bandwidth():
    """`xformers-2023-decodecall` splits the decode input into a call cost and a KV rate: the two
    input batches hold, the rate is the A6000's whole bandwidth and no more (the exact three-row
    solution would need 2.0 TB/s), and the held-out batch rises towards the table's 15.2 ms."""
    k = get_attention_kernel("xformers-2023-decodecall")
    assert k.decode_fixed_s > 0 and k.decode_efficiency <= 1.0
    p = perf("xformers-2023-decodecall")
    assert batch_ms(p, PREFILL, "attention") == pytest.approx(10.0, rel=1e-3)
    assert batch_ms(p, DECODE, "attention") == pytest.approx(5.68, rel=1e-3)
    assert batch_ms(perf(), HYBRID, "attention") < batch_ms(p, HYBRID, "attention") < 15.2
    # a riding decode costs more than its decode-only share, as the table's own 1.23x, but at most 1.08x
    rider = (batch_ms(p, HYBRID, "attention") - batch_ms(p, [[1021, 0]], "attention")) / 3
    assert 1.0 < rider / (batch_ms(p, DECODE, "attention") / 4) < 1.09


def test_the_papers_decode_cost_arithmetic():
    p = perf()
    assert decode_cost_ms(p, DECODE) == pytest.approx(batch_ms(p, DECODE) / 4)
    assert decode_cost_ms(p, HYBRID, PREFILL) == pytest.approx((batch_ms(p, HYBRID) - batch_ms(p, PREFILL)) / 3)
    assert batch_ms(p, HYBRID) == pytest.approx(batch_ms(p, HYBRID, "linear") + batch_ms(p, HYBRID, "attention"))
    assert cost_ratio(p, 1, 1024) > cost_ratio(p, 2, 1024) > cost_ratio(p, 18, 1024) > 1
    with pytest.raises(ValueError, match="no decode"):
        decode_cost_ms(p, PREFILL)
    with pytest.raises(ValueError, match="part 'norm'"):
        batch_ms(p, PREFILL, "norm")


def test_inputs_are_shown_never_counted():
    claims = load_claims()
    inputs = {c.id for c in claims if c.role == "input"}
    assert inputs == {"op_prefill_attention", "op_decode_attention"}
    assert next(c for c in claims if c.id == "op_hybrid_attention").judged  # held out: a check
    model = tuple(c for c in claims if c.kind == "model")
    table = claim_table(model, pd.DataFrame(columns=["experiment", "scheduler", "pd_ratio"]))
    assert table[table["role"] != "check"]["within"].isna().all()
    ok, judged = within_count(table)
    assert judged == len(model) - len(inputs) and ok <= judged
    text = claims_markdown(table)
    assert text.count("input of the model (not judged)") == len(inputs)


def test_the_figure_needs_no_run(tmp_path):
    """The operator-table figure is model arithmetic beside the published numbers: drawn without runs."""
    from harness.analysis.sarathi23 import STUDY
    from harness.analysis.sarathi23.figures import Study

    out = STUDY.draw_figures(Study(pd.DataFrame(columns=["experiment", "scheduler", "pd_ratio"]), load_claims()), tmp_path,
                only=("sarathi23_operator_table",))
    assert len(out) == 1 and out[0].path is not None and out[0].path.stat().st_size > 10_000
