"""Failure presets: published failure rates of large training clusters, with their sources.

A scenario writes ``failures: [{preset: llama3_405b}]`` (optionally with ``role``,
``gpus_per_node``, ``scale``). The preset expands into sources of an existing kind: one
``exponential`` source per cause of its cause table (a preset without one has a single
cause), every node of ``role`` failing at the published rate per node-day times the
cause's share. Each failure is labelled ``"<preset>: <cause>"`` (the ``source`` column of
``ftsim trace``), so a run says which published cause interrupted it.

How a published rate maps onto an ftsim cluster (explicit, and printed by
``python -m ftsim show presets``):

- a published rate is per *node-day* of a node with ``Preset.gpus_per_node`` GPUs (8 in
  every preset here: DGX/Grand Teton servers);
- an ftsim node of the failing ``role`` (default ``any``: trainers and embedding PS alike)
  stands for a server of ``gpus_per_node`` GPUs (default: the measured node's); its rate is
  the published rate × ``gpus_per_node`` / measured GPUs per node, i.e. **failures are
  assumed proportional to GPU count**. A DLRM embedding PS is often a CPU server: give
  ``role: trainer`` to apply the preset to the GPU trainers only, and a separate source for
  the PS;
- lifetimes are exponential (a Poisson process per node), failures take one node, and a
  failed node is replaced (its successor starts a fresh lifetime): the presets carry rates,
  not distribution shapes or correlations, because that is what the sources publish;
- ``scale`` multiplies every rate (a sensitivity knob, default 1).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

DAY_S = 86_400.0
"""Seconds per day: published rates are per node-day."""


@dataclass(frozen=True)
class Statistic:
    """The published figure a preset must reproduce, on the cluster and period it was
    measured on: ``count`` failures expected on ``nodes`` nodes over ``days`` days."""

    nodes: int
    days: float
    count: float
    what: str


@dataclass(frozen=True)
class Preset:
    """A published failure rate with its source.

    ``rate_per_node_day``: failures per node per day of a node with ``gpus_per_node`` GPUs.
    ``causes``: (label, weight) pairs; a failure's cause is drawn with probability weight /
    total (counts or percentages alike)."""

    name: str
    source: str
    measured: str
    assumes: str
    rate_per_node_day: float
    gpus_per_node: int
    causes: tuple[tuple[str, float], ...]
    statistic: Statistic

    def shares(self) -> list[tuple[str, float]]:
        """(cause, probability) pairs; the probabilities sum to 1."""
        total = sum(w for _, w in self.causes)
        return [(label, w / total) for label, w in self.causes]


LLAMA3_405B_TABLE5 = (
    ("faulty GPU", 148),
    ("GPU HBM3 memory", 72),
    ("software bug", 54),
    ("network switch/cable", 35),
    ("host maintenance", 32),
    ("GPU SRAM memory", 19),
    ("GPU system processor", 17),
    ("NIC", 7),
    ("NCCL watchdog timeouts", 7),
    ("silent data corruption", 6),
    ("GPU thermal interface + sensor", 6),
    ("SSD", 3),
    ("power supply", 3),
    ("server chassis", 2),
    ("IO expansion board", 2),
    ("dependency", 2),
    ("CPU", 2),
    ("system memory", 2),
)
"""Table 5 of Dubey et al. (the Llama 3 Herd of Models, arXiv 2407.21783, §3.3.4):
interruption counts per root cause of the 419 unexpected interruptions. The counts sum to
419; the table's printed percentages do not all follow from them (faulty GPU is printed as
30.1%, but 148/419 = 35.3%; the printed percentages sum to 94.9%, and the text's "GPU
issues ... 58.7%" matches 126 faulty-GPU interruptions, not 148). The preset uses the
counts: they add up to the stated total, and a share is a count / 419."""

LLAMA3_405B = Preset(
    name="llama3_405b",
    source="Dubey et al., The Llama 3 Herd of Models, arXiv 2407.21783 (2024), §3.3.4 "
    "and Table 5 (interruptions); §3.3.1 (8 GPUs per server) and Table 4 (16,384 GPUs)",
    measured="419 unexpected interruptions of Llama 3 405B pre-training in a 54-day "
    "snapshot on 16,384 H100 GPUs = 2,048 servers of 8 (plus 47 planned ones, not in "
    "the preset), classified by root cause in Table 5",
    assumes="rate = 419 / (54 days × 2,048 nodes) = 3.79 failures per 1000 node-days "
    "(the 54 days as wall-clock exposure, all 16,384 GPUs for the whole snapshot); each "
    "interruption is one node failure; causes in Table 5's proportions (its counts, see "
    "LLAMA3_405B_TABLE5)",
    rate_per_node_day=419 / (54 * 2048),
    gpus_per_node=8,
    causes=LLAMA3_405B_TABLE5,
    statistic=Statistic(2048, 54.0, 419.0, "419 unexpected interruptions in 54 days"),
)

META_RSC1 = Preset(
    name="meta_rsc1",
    source="Kokolis et al., Revisiting Reliability in Large-Scale Machine Learning "
    "Research Clusters, HPCA 2025 (arXiv 2410.21680): RSC-1",
    measured="6.50 node failures per 1000 node-days on RSC-1 (about 16k A100 GPUs in "
    "8-GPU nodes, 11 months of operation); read in secondary summaries, the primary's "
    "body text was not reachable in this session (its abstract confirms the 11 months "
    "and A100 fleet)",
    assumes="the published node rate, one cause. Kokolis et al.'s job-level MTTF of 7.9 h "
    "for 1,024-GPU jobs does not follow from it (6.50 per 1000 node-days on 128 nodes gives "
    "28.8 h) and is not used: it is a measured job statistic whose causes the node rate "
    "does not cover (which interruptions it counts could not be checked in the primary); "
    "their projections of 1.8 h at 16,384 GPUs and 0.23 h at 131,072 GPUs do follow from "
    "the rate (24 h / (2,048 × 0.0065), 24 h / (16,384 × 0.0065))",
    rate_per_node_day=6.50e-3,
    gpus_per_node=8,
    causes=(("node failure", 1),),
    statistic=Statistic(2000, 335.0, 6.50e-3 * 2000 * 335.0, "6.50 per 1000 node-days"),
)

META_RSC2 = Preset(
    name="meta_rsc2",
    source="Kokolis et al., Revisiting Reliability in Large-Scale Machine Learning "
    "Research Clusters, HPCA 2025 (arXiv 2410.21680): RSC-2",
    measured="2.34 node failures per 1000 node-days on RSC-2 (about 8k A100 GPUs in "
    "8-GPU nodes, 11 months); read in secondary summaries, as meta_rsc1",
    assumes="the published node rate, one cause",
    rate_per_node_day=2.34e-3,
    gpus_per_node=8,
    causes=(("node failure", 1),),
    statistic=Statistic(1000, 335.0, 2.34e-3 * 1000 * 335.0, "2.34 per 1000 node-days"),
)

PRESETS = {p.name: p for p in (LLAMA3_405B, META_RSC1, META_RSC2)}
"""Every preset by name."""

MAPPING = """\
Failure presets: failures: [{preset: NAME, role: any, gpus_per_node: 8, scale: 1}]
A preset's rate is per node-day of a node with the measured GPUs (8 in every preset). Each
ftsim node of `role` (default any: trainers and embedding PS) stands for a server of
`gpus_per_node` GPUs (default: the measured node's) and fails at rate x gpus_per_node /
measured GPUs x `scale`: failures are assumed proportional to GPU count. Lifetimes are
exponential, one node per failure; a preset with a cause table expands into one exponential
source per cause, each failure labelled "<preset>: <cause>"."""
"""How a preset's rate maps onto a scenario's cluster (printed by ``ftsim show presets``)."""


def describe(preset: Preset, width: int = 92) -> str:
    """The text ``ftsim show presets`` prints for one preset, wrapped at ``width``."""
    s = preset.statistic
    mtbf_days = 1 / preset.rate_per_node_day
    head = (
        f"{preset.name}: {preset.rate_per_node_day * 1000:.3g} failures per 1000 node-days "
        f"(node MTBF {mtbf_days:,.0f} days, nodes of {preset.gpus_per_node} GPUs)"
    )
    fields = [
        ("source", preset.source),
        ("measured", preset.measured),
        ("assumes", preset.assumes),
        ("check", f"{s.what}: {s.count:,.0f} failures on {s.nodes:,} nodes in {s.days:g} days"),
    ]
    lines = [head]
    for name, text in fields:
        first = f"    {name + ':':<10}"
        lines.append(textwrap.fill(text, width, initial_indent=first, subsequent_indent=" " * 14))
    if len(preset.causes) > 1:
        lines.append("    causes (share of failures; one exponential source each):")
        lines += [f"        {p:6.1%}  {cause}" for cause, p in preset.shares()]
    return "\n".join(lines)
