import pytest

from ftsim.scenario.units import (
    UnitError,
    format_bandwidth,
    format_duration,
    parse_bandwidth_Bps,
    parse_bytes,
    parse_duration_s,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30 min", 1800.0), ("1.5 h", 5400.0), ("250ms", 0.25), ("50 us", 5e-5), ("2 d", 172800.0)],
)
def test_durations(text, seconds):
    assert parse_duration_s(text) == pytest.approx(seconds)


def test_bandwidths_in_bits_and_bytes():
    assert parse_bandwidth_Bps("25 Gbit/s") == 25e9 / 8
    assert parse_bandwidth_Bps("25 Gbps") == 25e9 / 8
    assert parse_bandwidth_Bps("2 GB/s") == 2e9
    assert parse_bandwidth_Bps("1 GiB/s") == 2**30


def test_bandwidths_as_nics_and_people_write_them():
    """``12.5 GB/sec`` was told its unit "must be per second"; ``100 Gb/s``, the usual NIC
    spelling, was unknown where ``100 Gbps`` was read."""
    assert parse_bandwidth_Bps("12.5 GB/sec") == 12.5e9
    assert parse_bandwidth_Bps("1 GB/second") == 1e9
    assert parse_bandwidth_Bps("100 Gb/s") == parse_bandwidth_Bps("100 Gbit/s") == 12.5e9
    assert parse_bandwidth_Bps("100 Mb/s") == 12.5e6
    with pytest.raises(UnitError, match="unknown bandwidth unit 'Xb/s'"):
        parse_bandwidth_Bps("1 Xb/s")


def test_sizes():
    assert parse_bytes("64 GB") == 64e9
    assert parse_bytes("1 KiB") == 1024


@pytest.mark.parametrize("bad", ["fast", "3 parsecs", "1e", "GB"])
def test_unreadable_quantities_raise(bad):
    with pytest.raises(UnitError):
        parse_duration_s(bad)


def test_bandwidth_needs_per_second():
    with pytest.raises(UnitError, match="per second"):
        parse_bandwidth_Bps("25 GB")


def test_formatting_round_trips():
    for seconds in (0.763927383829716 * 3600, 1800.0, 5e-5, 2.5):
        assert parse_duration_s(format_duration(seconds)) == pytest.approx(seconds, rel=1e-11)
    assert parse_bandwidth_Bps(format_bandwidth(3.125e9)) == 3.125e9


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("8 hours", 8 * 3600.0), ("1 hour", 3600.0), ("20 minutes", 1200.0), ("5 mins", 300.0),
     ("90 seconds", 90.0), ("2 days", 172800.0), ("3 hrs", 10800.0)],
)  # fmt: skip
def test_time_units_written_out_are_read_as_their_symbols(text, seconds):
    """``8 hours`` was refused where ``8 hr`` is read (a new user's typo)."""
    assert parse_duration_s(text) == seconds


def test_an_interval_with_an_unknown_unit_says_which_units_there_are():
    from ftsim.scenario.intervals import _interval

    with pytest.raises(ValueError, match=r"unknown time unit 'hourz' \(use one of us, ms"):
        _interval("8 hourz")
