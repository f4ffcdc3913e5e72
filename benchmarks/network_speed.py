"""Speed of the flow-level network (``ftsim/sim/network.py``), by hand; nothing is asserted.

10,000 flows with Poisson arrivals over 200 links shaped like a cluster: 96 nodes with a
NIC send and a NIC receive link each, 6 rack uplinks (16 nodes × NIC / 4, i.e. 4:1
oversubscription) and the storage's aggregate read and write links. Each flow is a
checkpoint write (NIC send → uplink → storage write) or a read (storage read → uplink →
NIC receive) of an exponential size. The arrival rate sets how many flows are active at
once, and so the cost of each rate recomputation, O(active flows × route length).

Prints, per arrival rate, the median over several runs of flows simulated per second of
wall time, SimPy events scheduled per flow (all of them, and the network's alone, i.e.
without the arrival timeouts) and the time-averaged number of active flows.

    python benchmarks/network_speed.py [--quick]

``--quick`` (a smoke test, run by the tests): 500 flows, one run per rate.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import simpy

from ftsim.sim.network import Network

FLOWS = 10_000
NODES, RACKS = 96, 6
NIC_Bps = 12.5e9
STORAGE_Bps = 100e9
MEAN_SIZE_B = 1e9
OVERSUBSCRIPTION = 4


class CountingEnv(simpy.Environment):
    """Counts every event SimPy schedules."""

    scheduled = 0

    def schedule(self, event, priority=1, delay=0):
        self.scheduled += 1
        super().schedule(event, priority, delay)


def build(env: simpy.Environment) -> tuple[Network, list, list]:
    """The 200-link cluster; returns the network and the write and read routes per node."""
    net = Network(env, latency_s=50e-6)
    per_rack = NODES // RACKS
    uplinks = [net.link(f"rack{r}_up", per_rack * NIC_Bps / OVERSUBSCRIPTION) for r in range(RACKS)]
    write, read = net.link("storage_write", STORAGE_Bps), net.link("storage_read", STORAGE_Bps)
    writes, reads = [], []
    for i in range(NODES):
        up = uplinks[i // per_rack]
        writes.append((net.link(f"nic_send{i}", NIC_Bps), up, write))
        reads.append((read, up, net.link(f"nic_recv{i}", NIC_Bps)))
    return net, writes, reads


def run(arrivals_per_s: float, seed: int, flows: int = FLOWS) -> tuple[float, int, float]:
    """One run: wall seconds, SimPy events scheduled, time-averaged active flows."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / arrivals_per_s, flows)
    sizes = rng.exponential(MEAN_SIZE_B, flows)
    nodes = rng.integers(0, NODES, flows)
    is_write = rng.random(flows) < 0.5
    env = CountingEnv()
    net, writes, reads = build(env)

    def arrive():
        for k in range(flows):
            yield env.timeout(gaps[k])
            route = writes[nodes[k]] if is_write[k] else reads[nodes[k]]
            net.start(float(sizes[k]), route, category="write" if is_write[k] else "read")

    env.process(arrive())
    start = time.perf_counter()
    env.run()
    wall_s = time.perf_counter() - start
    busy_s = sum(rec.end_s - rec.start_s for rec in net.records)
    return wall_s, env.scheduled, busy_s / env.now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 500 flows, 1 run")
    args = parser.parse_args()
    flows, repeats = (500, 1) if args.quick else (FLOWS, 5)
    print(f"{flows} flows, 200 links, Poisson arrivals; medians of {repeats} runs")
    print(f"{'arrivals/s':>10} {'active':>8} {'flows/s':>9} {'events/flow':>12} {'network':>8}")
    for arrivals_per_s in (20.0, 100.0, 200.0):
        runs = [run(arrivals_per_s, seed, flows) for seed in range(repeats)]
        wall_s = statistics.median(r[0] for r in runs)
        events = statistics.median(r[1] for r in runs) / flows
        active = statistics.median(r[2] for r in runs)
        network = events - 1  # the arrival process schedules one timeout per flow
        print(
            f"{arrivals_per_s:>10.0f} {active:>8.1f} {flows / wall_s:>9.0f} "
            f"{events:>12.2f} {network:>8.2f}"
        )


if __name__ == "__main__":
    main()
