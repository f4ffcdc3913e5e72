"""ECRM's rebuild ranges as flow groups: the same run as with one flow per survivor."""

import pytest

import ftsim.sim.network as network
from ftsim.experiments.runner import simulate
from ftsim.policies.ecrm import Ecrm
from ftsim.sim.network import GroupedFlows
from tests.conftest import scenario

BUSY = (
    "policies=[{kind: ecrm, k: 2, r: 1, fallback: partial, interval: 20 min}]",
    "cluster.emb_ps=60",
    "cluster.nic_bandwidth=1 Gbit/s",
    "failures.0.count=40",
    "trainer.enabled=false",
)
"""60 PS losing 4 at a time, 40 times, on slow NICs, saving every 20 min: ranges of
several failures overlap, and saves and reloads disturb ranges on their way."""


def _runs(extra: tuple[str, ...], record: bool) -> list:
    """Rows, timelines and flow records (with ``record``: 2 replications, else 4); how many
    range transfers were planned in blocks and how many of them a disturbance made single
    flows."""
    seen = {"in blocks": 0, "made single": 0}
    plan_blocks, unblock = network.Network._plan_blocks, network.Network._unblock

    def counted_plan(net, flows):
        plan = plan_blocks(net, flows)
        seen["in blocks"] += plan is not None
        return plan

    def counted_unblock(net, transfer):
        seen["made single"] += transfer.blocks is not None and transfer.pending > 0
        unblock(net, transfer)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(network.Network, "_plan_blocks", counted_plan)
        patch.setattr(network.Network, "_unblock", counted_unblock)
        s = scenario("prod50h", *BUSY, *extra)
        out = []
        for rep in range(2 if record else 4):
            sim = simulate(s, 0, rep, record_flows=record)
            records = sim.net.net.records
            out.append((sim.row(), sim.timeline, records))
    return out, seen


@pytest.mark.parametrize(
    "extra, record",
    [((), False), (("policies.0.flow_bandwidth=200 Mbit/s",), True)],
)
def test_grouped_rebuild_ranges_run_as_one_flow_per_survivor(extra, record, monkeypatch):
    """Every range of 4 shards at once is 4 groups over the survivors' NICs (a column
    they share) and a few single flows; planned in blocks, and made single flows when a
    save, a reload or another range starts meanwhile. Rows, timelines and flow records
    (with a cap per connection, a column of each group's own) are the same, bit for bit,
    as with every survivor's flow given on its own."""
    grouped, seen = _runs(extra, record)
    assert seen["in blocks"] > 25 and seen["made single"] > 5
    monkeypatch.setattr(
        Ecrm, "_grouped_range", lambda self, net, key: tuple(self._range_pairs(net, key))
    )
    flows, none = _runs(extra, record)
    assert none["in blocks"] == 0
    assert grouped == flows


def test_racks_keep_one_flow_per_survivor():
    """With racks a survivor's route depends on its rack: no groups."""
    sim = simulate(scenario("prod50h", *BUSY, "cluster.racks={size: 8}"), 0, 0)
    ranges = [v for k, v in sim.net._repeated.items() if k[0] == "ecrm range"]
    assert ranges and not any(isinstance(r, GroupedFlows) for r in ranges)
