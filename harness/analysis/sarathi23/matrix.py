"""The first Sarathi paper's runs as `python -m harness` override lists (harness.analysis.study's
Cell): one group per experiment of the paper, each an offline throughput run of a preset.

  gain       Sec. 5.2 table: LLaMA-13B / A6000 at 1K and 2K (B 6, P:D 50), LLaMA-33B / A100 at
             1K (B 10, P:D 28) and 2K (B 5, P:D 63); chunk 256 cut to whole tiles
  pd         Sec. 5.2 P:D sweep: gain against P:D for (C, B) = (256, 18), (256, 6), (512, 18)
  chunk      Sec. 5.5 chunk size: the same sweep with C = 64 and 128 (B 18)
  orca       Sec. 5.3: decode-maximal, Orca best and worst case at 1K, 2K and 3K (B 10, P:D 28)
  pipeline   Sec. 5.4: GPT-3 175B on 64 A100s, TP-8 x PP-8 (Sarathi, Orca-style) and 8 x TP-8, each
             twice: with the engine's CPU costs (perf.cpu_costs=engine, the default) and with GPU
             kernels only (perf.cpu_costs=none, as the paper's simulator priced them)
"""
from __future__ import annotations

from harness.analysis.study import Cell

PD_RATIOS = (1, 2, 4, 7, 10, 14, 20, 28, 40, 50, 100, 200)
# (chunk C, batch B) of each P:D sweep, and the preset that holds it
SWEEPS = {(256, 18): "sarathi23_pd_sweep", (256, 6): "sarathi23_pd_sweep", (512, 18): "sarathi23_pd_sweep",
          (64, 18): "sarathi23_chunk_ablation", (128, 18): "sarathi23_chunk_ablation"}
GAIN_ROWS = {  # name -> overrides of sarathi23_gain (the paper's table rows)
    "sarathi23_gain_llama13b_1k": (),
    "sarathi23_gain_llama13b_2k": ("dataset.synthetic.sequence_length=2048",),
    "sarathi23_gain_llama33b_1k": ("model=llama-33b", "hardware=a100_80g", "arrival.concurrency=10",
                                   "dataset.synthetic.pd_ratio=28"),
    "sarathi23_gain_llama33b_2k": ("model=llama-33b", "hardware=a100_80g", "arrival.concurrency=5",
                                   "dataset.synthetic.pd_ratio=63", "dataset.synthetic.sequence_length=2048"),
}
SEQUENCE_LENGTHS = (1024, 2048, 3072)
PIPELINE = "sarathi23_pipeline"
REPLICAS = "sarathi23_pipeline_tp8_replicas"
GPU_ONLY = "_gpu_only"  # the suffix of the pipeline cells priced without CPU costs (perf.cpu_costs=none)
CPU_COSTS = {"engine": "", "none": GPU_ONLY}  # perf.cpu_costs -> the suffix of its pipeline cells


def orca_name(length: int) -> str:
    return f"sarathi23_orca_{length // 1024}k"


def sarathi23_cells() -> tuple[Cell, ...]:
    cells = [Cell(name, ("experiment=sarathi23_gain", f"name={name}", *over), "sarathi23")
             for name, over in GAIN_ROWS.items()]
    for (chunk, batch), preset in SWEEPS.items():
        for pd in PD_RATIOS:
            name = f"sarathi23_pd_c{chunk}_b{batch}_pd{pd:g}"
            cells.append(Cell(name, (f"experiment={preset}", f"name={name}", f"dataset.synthetic.pd_ratio={pd}",
                                     f"scheduler.decode_maximal.chunk_size={chunk}", f"arrival.concurrency={batch}"),
                              "sarathi23"))
    for length in SEQUENCE_LENGTHS:
        cells.append(Cell(orca_name(length), ("experiment=sarathi23_orca", f"name={orca_name(length)}",
                                              f"dataset.synthetic.sequence_length={length}"), "sarathi23"))
    replicas = ("parallel.pp=1", "cluster.instances=8", "scheduler=[orca_best,decode_maximal]",
                "scheduler.orca_best.max_num_seqs=17", "scheduler.decode_maximal.max_num_seqs=17")
    for choice, suffix in CPU_COSTS.items():
        cpu = (f"perf.cpu_costs={choice}",) if suffix else ()
        cells.append(Cell(PIPELINE + suffix, ("experiment=sarathi23_pipeline", f"name={PIPELINE + suffix}", *cpu), "sarathi23"))
        cells.append(Cell(REPLICAS + suffix, ("experiment=sarathi23_pipeline", f"name={REPLICAS + suffix}", *replicas, *cpu),
                          "sarathi23"))
    return tuple(cells)
