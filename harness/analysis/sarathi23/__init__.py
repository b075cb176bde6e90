"""The first Sarathi paper (Agrawal et al., "SARATHI: Efficient LLM Inference by Piggybacking
Decodes with Chunked Prefills", arXiv 2308.16369) reproduced: its cells (`matrix`), their offline
runs read back (`runs`), the published numbers against ours (`claims`, data/paper/sarathi_2023.yaml),
its figures (`figures`) and its section of figures/REPORT.md (`report`)."""
from __future__ import annotations

from harness.analysis.study import FigureSpec, Study, lazy

FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("sarathi23_operator_table", "The paper's operator table and per-token costs, LLaMA-13B on the RTX A6000 (Sarathi 2023)",
               lazy("harness.analysis.sarathi23.operator_figs:fig_operator_table"),
               "Left: linear and attention time of the paper's three basic batches (decode-maximal batching), the model's "
               "bars beside the published values (x); the hatched attention bars are the model's inputs (perf.stack="
               "sarathi-2023 prices attention from them), the hybrid batch's is held out. Right: a decode token's cost over "
               "a prefill token's at B sequences of 1,024 tokens (linear + attention), with the paper's 200x / 100x / 16.7x."),
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
    FigureSpec("sarathi23_bubbles", "Pipeline bubbles a request, their distribution (Sarathi 2023, Sec. 5.4)",
               lazy("harness.analysis.sarathi23.bubble_figs:fig_bubbles"),
               "GPT-3 175B, TP-8 x PP-8 on 64 A100s, 10,000 requests: the idle time each request's micro-batches spent "
               "in the pipeline (every cause), its 10th to 99th percentile for Orca-style and Sarathi, with the engine's "
               "CPU costs (left) and with GPU kernels only (right), and the ratio of the medians beside the paper's 6.29x."),
    FigureSpec("sarathi23_chunk_size", "Chunk size (Sarathi 2023, Sec. 5.5)",
               lazy("harness.analysis.sarathi23.figures:fig_chunk_size"),
               "Left: the performance model's chunked prefill and attention time over an unchunked 1K prefill, and (dashed) "
               "the attention under the what-if with a 21.5 us per-call cost (perf.attention_kernel=xformers-2023-percall), "
               "which the operator table cannot rule out. Right: the gain of each chunk size over the P:D sweep (B 18)."),
    FigureSpec("sarathi23_composition", "Per-iteration composition of decode-maximal batches (Sarathi 2023)",
               lazy("harness.analysis.sarathi23.figures:fig_composition"),
               "From the simulator's iteration log of the C 256, B 18 sweep: below P:D 15 decodes outnumber what the chunks "
               "can carry (decode-only iterations remain), above it chunks run with fewer riders."),
    FigureSpec("sarathi23_tile_quantization", "Tile quantization, LLaMA-13B on the RTX A6000 (Sarathi 2023, Sec. 4)",
               lazy("harness.analysis.sarathi23.figures:fig_tile"),
               "One layer's linear time against the tokens of an iteration: 257 tokens pay for 384 rows."),
)

# Its figures go in its own section (listed=False), after the Sarathi-Serve report.
STUDY = Study("sarathi23", cells=lazy("harness.analysis.sarathi23.matrix:sarathi23_cells"),
              load=lazy("harness.analysis.sarathi23.report:load"), figures=FIGURES,
              parts=lazy("harness.analysis.sarathi23.report:parts"), listed=False)
