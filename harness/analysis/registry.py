"""Every figure's name, title, caption and builder, importable without what draws them.

`python -m harness --help` lists the figures and `figure=NAME` checks a name before anything is
drawn: neither should pay for matplotlib, seaborn and pandas (seconds of imports). A builder is
imported where it is first called (`lazy`). The figures of the Sarathi-Serve study
(`harness/analysis/figures.py` builds them from its `Inputs`) and of the first Sarathi paper
(`harness/analysis/sarathi23/figures.py`, from its `Study`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any


def lazy(ref: str) -> Callable[..., Any]:
    """The function `module:name`, imported when first called."""
    module, _, name = ref.partition(":")

    def call(*args, **kwargs):
        return getattr(import_module(module), name)(*args, **kwargs)

    call.__name__ = name
    return call


@dataclass(frozen=True)
class FigureSpec:
    name: str  # file stem under figures/
    title: str
    build: Callable[[Any], Any]  # Inputs -> Figure (the Sarathi 2023 figures: Study -> Figure)
    caption: str = ""  # what to read off the figure, printed under it in the report


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("fig01_generation_stall", "Generation stalls: one request's tokens, and P99 TBT vs load (Fig. 1 analog)",
               lambda i: lazy("harness.analysis.latency_figs:fig_stall")(i.runs, i.probes),
               "Left: the request with the longest gap between two of its tokens under vLLM (shaded), and the same "
               "request under Sarathi-Serve (same load when a fixed-rate run exists). Right: P99 TBT of every probe "
               "of the capacity searches against the SLO (dashed): where a line crosses it is that scheduler's "
               "TBT-limited capacity."),
    FigureSpec("fig10_11_capacity", "Capacity per deployment, dataset, SLO and scheduler (Fig. 10–11 analog)",
               lambda i: lazy("harness.analysis.capacity_figs:fig_capacity")(i.runs, i.paper),
               "Highest Poisson rate meeting P99 TBT ≤ SLO and median scheduling delay ≤ 2 s. Above each group: "
               "Sarathi-Serve's reproduced capacity ratio over each baseline, with the paper's where it publishes one."),
    FigureSpec("fig12_capacity_vs_slo", "Capacity vs P99 TBT SLO (Fig. 12 analog)",
               lambda i: lazy("harness.analysis.capacity_figs:fig_capacity_vs_slo")(i.runs, i.paper),
               "How capacity changes as the TBT SLO loosens (strict → relaxed), per deployment with two or more SLOs. "
               "Falcon-180B on TP-8 (dotted) is run for vLLM only, as in the paper, where it is Fig. 13's baseline. "
               "On the two pipeline-parallel deployments Sarathi-Serve's capacity *falls* when the SLO is relaxed: "
               "there both capacities are limited by the median scheduling delay (throughput), not by TBT, and the "
               "paper's relaxed setting uses a larger token budget (2,048 for Falcon-180B, 1,536 for LLaMA2-70B, "
               "against 512). On two stages, larger micro-batches are less even and a request in flight cannot be "
               "scheduled again, so the stages idle more. Measured in simulation (512 requests per probe): Falcon-180B "
               "TP4-PP2 at the relaxed SLO reaches 1.03 QPS with budget 512 and 0.86 QPS with 2,048; on TP-8 (no "
               "pipeline) the same change raises it from 0.38 to 0.44 QPS "
               "(`python -m harness experiment=falcon180b_tp4pp2_relaxed scheduler=[sarathi] "
               "scheduler.sarathi.token_budget=512 search.num_requests=512`, and with `parallel=tp8`)."),
    FigureSpec("fig13_pipeline_parallel", "Falcon-180B: TP-8 vs TP4-PP2 (Fig. 13 analog)",
               lambda i: lazy("harness.analysis.capacity_figs:fig_pipeline")(i.runs, i.probes, i.paper),
               "Left: capacity of each scheduler × parallelism (dotted bars: tensor parallel only), with the paper's "
               "cross-deployment ratios below. Right: median TBT against load for each."),
    FigureSpec("fig17_prefill_decode", "Colocated chunked prefills vs disaggregated prefill/decode, at equal GPUs (beyond the paper)",
               lambda i: lazy("harness.analysis.pd_figs:fig_pd")(i.clusters),
               "Each deployment's GPUs as four colocated replicas (Sarathi-Serve, vLLM; least-outstanding routing) or "
               "split into prefill and decode instances (P:D; vLLM's whole-prompt prefills, KV moved after each "
               "prefill over the node's links), 1,024 requests per probe; one row per deployment. Left: "
               "the paper's criterion, under which the splits with one decode instance come out best; it cannot see "
               "a request's one long wait for a decode slot (one gap per request is under 1 % of the pooled TBT "
               "samples). Middle and right: DistServe's criterion (90 % of requests within a TTFT SLO, a multiple of "
               "one unloaded 2,048-token prefill, and a per-request TPOT SLO, the deployment's strict TBT SLO), "
               "which does: there a colocated layout wins, vLLM's prefill-first one when TTFT is tight and "
               "Sarathi-Serve's when it is loose, and the best split stays below the winner, because a decode instance's "
               "KV pool holds few requests' contexts while the prefill instances' memory goes unused for them. "
               "The best value in each panel is bold."),
    FigureSpec("fig18_prefix_caching", "Conversations and agents, with and without prefix caching (beyond the paper)",
               lambda i: lazy("harness.analysis.prefix_figs:fig_prefix")(i.prefix, i.prefix_probes),
               "Yi-34B TP2 on 2x A100-80G, 2,048 requests per probe. Capacity of Sarathi-Serve against its token "
               "budget (lines), vLLM and Orca (horizontal), with the engine's prefix cache (solid) and without "
               "(dotted), for ShareGPT conversations (each turn carries the conversation so far) and agent "
               "transcripts (a 4,000-token head, a tail growing by a step), at the paper's strict and relaxed TBT "
               "SLOs. Log scales."),
)




SARATHI23_FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("sarathi23_decode_speedup", "Decode speedup of piggybacked decodes (Sarathi 2023, Sec. 5.1)",
               lazy("harness.analysis.sarathi23.figures:fig_decode_speedup"),
               "The paper's definition (Sec. 5.1): per-token time of a decode-only batch of B over the marginal per-token "
               "time of the B - 1 decodes riding on a tile-aligned 256-token chunk (averaged over a prompt's chunks), from "
               "the performance model, for the batch sizes that fit the A6000 at each length; the two LLaMA-13B table rows "
               "measured from their runs' iteration logs beside the published values (x, and the published 2.8x-10x range)."),
    FigureSpec("sarathi23_throughput_gain", "End-to-end throughput gain and decode speedup (Sarathi 2023, Sec. 5.2 table)",
               lazy("harness.analysis.sarathi23.figures:fig_throughput_gain"),
               "Offline runs, B requests kept in flight, every request the same length: decode-maximal "
               "batching against prefill-only / decode-only batches on the same requests."),
    FigureSpec("sarathi23_pd_sweep", "Throughput against the P:D ratio (Sarathi 2023, Sec. 5.2)",
               lazy("harness.analysis.sarathi23.figures:fig_pd_sweep"),
               "Left: gain over the baseline for each chunk size C and batch size B; the dotted lines mark C / (B - 1), where "
               "every decode rides on a chunk. Right: absolute throughput for C 256, B 18."),
    FigureSpec("sarathi23_orca", "Against Orca's best and worst case (Sarathi 2023, Sec. 5.3)",
               lazy("harness.analysis.sarathi23.figures:fig_orca"),
               "Throughput over Orca's worst case (prefills and decodes never share an iteration), by sequence length."),
    FigureSpec("sarathi23_pipeline", "Pipeline parallelism: GPT-3 175B on 64 A100s (Sarathi 2023, Sec. 5.4)",
               lazy("harness.analysis.sarathi23.figures:fig_pipeline"),
               "Left: time to finish 10,000 requests waiting at t = 0 (Zipf 1K-4K tokens, P:D 10). Right: the median "
               "pipeline-bubble time a request, split by cause: schedule (stage 0 had nothing it could launch), send "
               "(waiting for activations), upstream (waiting for the micro-batch to clear the earlier stages: uneven "
               "micro-batches and the pipeline's fill). Orca-style: one micro-batch per stage in flight, B split across "
               "them. Third: the four published ratios (grey) beside ours with the engine's CPU costs and with GPU kernels "
               "only (perf.cpu_costs=engine | none)."),
    FigureSpec("sarathi23_chunk_size", "Chunk size (Sarathi 2023, Sec. 5.5)",
               lazy("harness.analysis.sarathi23.figures:fig_chunk_size"),
               "Left: the performance model's chunked prefill and attention time over an unchunked 1K prefill. Right: the "
               "gain of each chunk size over the P:D sweep (B 18)."),
    FigureSpec("sarathi23_composition", "Per-iteration composition of decode-maximal batches (Sarathi 2023)",
               lazy("harness.analysis.sarathi23.figures:fig_composition"),
               "From the simulator's iteration log of the C 256, B 18 sweep: below P:D 15 decodes outnumber what the chunks "
               "can carry (decode-only iterations remain), above it chunks run with fewer riders."),
    FigureSpec("sarathi23_tile_quantization", "Tile quantization, LLaMA-13B on the RTX A6000 (Sarathi 2023, Sec. 4)",
               lazy("harness.analysis.sarathi23.figures:fig_tile"),
               "One layer's linear time against the tokens of an iteration: 257 tokens pay for 384 rows."),
)
