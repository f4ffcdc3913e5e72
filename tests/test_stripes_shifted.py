"""A shard's read counts (:meth:`StripeLayout.reads`, :meth:`StripeLayout.rebuild_reads`)
made by shifting those of the first shard of its class, worked out once (100× nodes meet
~7 new shards a replication, each O(N) in Python loops and NumPy calls): the same arrays,
bit for bit, as working them out for the shard."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ftsim.stripes as stripes
from ftsim.stripes import StripeLayout


@st.composite
def layouts(draw) -> StripeLayout:
    """Rotating layouts (gcd(N, k) and gcd(N − k, r) of 1 and more) and grouped ones."""
    k, r = draw(st.integers(1, 5)), draw(st.integers(1, 2))
    if draw(st.booleans()):
        return StripeLayout(draw(st.integers(k + r, 40)), k, r)
    size = draw(st.integers(k + r, k + r + 3))
    return StripeLayout(size * draw(st.integers(1, 6)), k, r, "grouped", size)


def _bits(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array, dtype=np.float64).tobytes()


@settings(max_examples=150, deadline=None)
@given(layout=layouts())
def test_a_shifted_shards_reads_are_its_own_bit_for_bit(layout):
    for shard in range(layout.n_shards):
        for make in (stripes._reads, stripes._parity_reads):
            assert _bits(layout._shifted(make, shard)) == _bits(make(layout, shard))
        own = stripes._parity_reads(layout, shard) + stripes._reads(layout, shard)
        assert _bits(layout.rebuild_reads(shard)) == _bits(own)
        assert _bits(layout.reads(shard)) == _bits(stripes._reads(layout, shard))


@pytest.mark.parametrize(
    "planted", ["the other way", "every shard from shard 0"], ids=["direction", "class"]
)
def test_a_wrong_shift_fails_the_check(planted, monkeypatch):
    """Shifting the other way, or shifting shard 0's counts for every shard (ignoring that
    with gcd(N, k) = 2 odd and even shards hold their stripes at other offsets): planted
    bugs that the check above catches."""

    def wrong(self, make, shard):
        if planted == "the other way":
            return np.roll(make(self, shard % self._period()[0]), -shard)
        return np.roll(make(self, 0), shard)

    layout = StripeLayout(10, 2, 1)
    monkeypatch.setattr(StripeLayout, "_shifted", wrong)
    differ = [
        _bits(layout._shifted(stripes._reads, x)) != _bits(stripes._reads(layout, x))
        for x in range(10)
    ]
    assert any(differ)
