"""The storage bandwidth model: per-node caps, aggregate sharing, processor sharing."""

import pytest

from ftsim.sim.cluster import StateLayout, transfer_time_s


def test_single_flow_limited_by_node():
    assert transfer_time_s([10e9], per_node_Bps=1e9, aggregate_Bps=100e9) == pytest.approx(10)


def test_equal_flows_share_aggregate():
    assert transfer_time_s([1e9] * 10, per_node_Bps=1e9, aggregate_Bps=2e9) == pytest.approx(5)


def test_processor_sharing_speeds_up_the_rest():
    # Two flows share 2 GB/s: the 1 GB flow ends at 1 s; the 3 GB flow then runs alone at
    # its node cap of 1.5 GB/s for the remaining 2 GB.
    t = transfer_time_s([1e9, 3e9], per_node_Bps=1.5e9, aggregate_Bps=2e9)
    assert t == pytest.approx(1 + 2 / 1.5)


def test_latency_added_once_and_empty_transfer_is_free():
    assert transfer_time_s([1e9], 1e9, 1e9, latency_s=0.5) == pytest.approx(1.5)
    assert transfer_time_s([], 1e9, 1e9, latency_s=0.5) == 0.0


def test_full_save_of_prod50h_is_storage_bound():
    from tests.conftest import scenario

    s = scenario("prod50h")
    layout = StateLayout(s.job, s.cluster)
    total = layout.total_bytes
    assert total == pytest.approx(s.job.embedding_bytes + s.job.dense_bytes)
    # 18 PS at 3.125 GB/s each could write 56 GB/s: the 4 GB/s storage share is the limit,
    # except at the very end when the small dense flow has finished.
    assert layout.full_save_s() == pytest.approx(total / 4e9, rel=1e-3)
