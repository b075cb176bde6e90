"""The first Sarathi paper (Agrawal et al., "SARATHI: Efficient LLM Inference by Piggybacking
Decodes with Chunked Prefills", arXiv 2308.16369) reproduced: its cells (`matrix`), their offline
runs read back (`runs`), the published numbers against ours (`claims`, data/paper/sarathi_2023.yaml),
its figures (`figures`) and its section of figures/REPORT.md (`report`)."""
