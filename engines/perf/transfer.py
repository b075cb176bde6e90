"""Moving a prompt's KV cache from a prefill instance to a decode instance (disaggregated serving).

Placement (`PLACEMENTS`): instances fill GPUs node by node, each instance's GPUs contiguous (as
`Deployment.create` places one instance's stages): `by_role` puts every prefill instance first,
then the decode instances (transfers then cross nodes as soon as a role fills one);
`interleaved` alternates prefill and decode instances (p0, d0, p1, d1, ...), so a pair that fits
a node moves its KV inside it (DistServe's placement favours exactly that, OSDI'24 Sec. 4.2).
Every GPU of the prefill instance holds its TP/PP shard of the prompt's KV and sends it on its
own path, so min(prefill GPUs, decode GPUs) lanes carry the KV in parallel and the busiest lane
carries kv_bytes / lanes; a lane is priced as one point-to-point send over the slowest path any
lane takes (`operators.p2p_time`: latency + bytes over the link's measured send bandwidth). Own
paths per GPU hold for NVLink/NVSwitch and for DGX-style nodes with one InfiniBand NIC per GPU;
on a node sharing one Ethernet NIC it is optimistic by up to the lane count.

Timing (`TRANSFER_MODES`):
- `after_prefill`: the KV moves once the prompt's last chunk has run, whole. vLLM's disaggregated
  prefill (the KV connectors, e.g. NixlConnector) and DistServe (OSDI'24, Sec. 4: decode
  instances fetch the KV of finished prefills) work this way.
- `layerwise`: each layer's KV is sent as soon as the layer has computed it, overlapping the
  prefill (Splitwise, ISCA'24, Sec. IV-C); what remains visible after the last chunk is at least
  one layer's share, or the part of the transfer the prefill was too short to hide.
Transfers out of one prefill instance go one at a time, in the order the prompts finish (its
egress link is shared; queueing behind it is part of the transfer gap).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.errors import HarnessError

from .deployment import Deployment
from .hardware import Topology
from .links import LinkSpec
from .operators import p2p_time

TRANSFER_MODES = ("after_prefill", "layerwise")
PLACEMENTS = ("by_role", "interleaved")


@dataclass(frozen=True)
class KvTransfer:
    """How long one prompt's KV takes from one prefill instance to one decode instance."""

    link: LinkSpec
    lane_bytes_per_token: float  # KV bytes per prompt token on the busiest lane
    layers: int
    mode: str

    def seconds(self, prompt_tokens: int) -> float:
        """The whole transfer, link idle at its start."""
        return float(p2p_time(np.asarray(float(prompt_tokens) * self.lane_bytes_per_token), self.link))

    def arrival(self, prompt_tokens: int, prefill_start_s: float, prefill_end_s: float, link_free_s: float) -> float:
        """When the KV is all on the decode instance, given when the prompt's prefill ran and
        when the prefill instance's egress link is free."""
        duration = self.seconds(prompt_tokens)
        if self.mode == "after_prefill":
            return max(prefill_end_s, link_free_s) + duration
        start = max(prefill_start_s, link_free_s)
        return max(start + duration, prefill_end_s + duration / self.layers)


def check_mode(mode: str) -> str:
    if mode not in TRANSFER_MODES:
        raise HarnessError(f"unknown KV transfer mode {mode!r}; known: {', '.join(TRANSFER_MODES)}")
    return mode


def topology_links(topology: Topology) -> dict[str, LinkSpec]:
    return {link.name: link for link in (topology.fast_link, topology.slow_link, topology.inter_node_link)}


def plan_kv_transfers(prefill: Deployment, decode: Deployment, num_prefill: int, num_decode: int,
                      topology: Topology, link: str | None = None, mode: str = "after_prefill",
                      placement: str = "by_role") -> list[list[KvTransfer]]:
    """transfers[p][d]: prefill instance p to decode instance d, placed as `placement` says; `link`
    (a link name of `topology`) overrides the path every lane takes."""
    check_mode(mode)
    if placement not in PLACEMENTS:
        raise HarnessError(f"unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
    if prefill.model.name != decode.model.name:
        raise HarnessError(f"prefill and decode instances serve different models: {prefill.model.name}, {decode.model.name}")
    links = topology_links(topology)
    if link is not None and link not in links:
        raise HarnessError(f"kv_link={link!r}: topology {topology.name} has no such link; its links are "
                           f"{', '.join(links)}")
    gp, gd = prefill.num_gpus, decode.num_gpus
    lanes = min(gp, gd)
    lane_bytes = prefill.model.kv_bytes_per_token / lanes
    first = _first_gpus(num_prefill, gp, num_decode, gd, placement)
    out = []
    for p in range(num_prefill):
        row = []
        for d in range(num_decode):
            src, dst = first["p", p], first["d", d]
            path = links[link] if link is not None else min(
                (topology.link_between(src + k, dst + k) for k in range(lanes)),
                key=lambda lk: (lk.p2p_bandwidth, -lk.latency_s))
            row.append(KvTransfer(path, lane_bytes, prefill.model.num_layers, mode))
        out.append(row)
    return out


def _first_gpus(num_prefill: int, gp: int, num_decode: int, gd: int, placement: str) -> dict[tuple[str, int], int]:
    """The first GPU of each instance, ("p", i) or ("d", j), filled in placement order."""
    if placement == "by_role":
        order = [("p", i) for i in range(num_prefill)] + [("d", j) for j in range(num_decode)]
    else:
        order = []
        for k in range(max(num_prefill, num_decode)):
            order += [("p", k)] * (k < num_prefill) + [("d", k)] * (k < num_decode)
    out, gpu = {}, 0
    for role, i in order:
        out[role, i] = gpu
        gpu += gp if role == "p" else gd
    return out
