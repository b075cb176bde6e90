"""The deployment planner (`python -m harness plan ...`): every deployment that fits (TP x PP over
the node topology, weights and KV in memory) crossed with the schedulers (Sarathi-Serve over token
budgets, vLLM over max batch sizes, Orca), each one's capacity found in the simulator, the replicas
a target load needs, ranked by GPUs and cost; the winner as `vllm serve` flags and a preset.

`space` enumerates, `bounds` prices what cannot win from the performance model alone, `search`
runs the capacities (screened with few requests, the leaders refined with the full search),
`replicas` is the arithmetic of a load split over replicas, `answer` ranks and prints, `figure`
draws the Pareto front, `export` writes the winner out. With `plan.disaggregated=true`, `units`
adds P prefill + D decode instances as candidates; `check` simulates the winner's replicas
behind a router at the target.
"""
