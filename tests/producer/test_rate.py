"""Rate profiles: pure functions of time, and their integrals."""

from __future__ import annotations

import pytest

from producer.rate import RateProfile, parse_profile


def test_constant():
    p = parse_profile("constant", 250.0)
    assert p.rate_at(0) == p.rate_at(99.5) == 250.0
    assert p.cumulative(4.0) == 1000.0
    assert not p.unlimited and p.peak == 250.0
    assert parse_profile("constant", 0.0).unlimited


def test_ramp():
    p = parse_profile("ramp:100:500:10", 0)
    assert p.rate_at(0) == 100.0
    assert p.rate_at(5) == 300.0
    assert p.rate_at(10) == p.rate_at(60) == 500.0
    assert p.cumulative(10) == 3000.0  # (100 + 500) / 2 * 10
    assert p.cumulative(5) == 1000.0  # (100 + 300) / 2 * 5
    assert p.cumulative(12) == 4000.0


def test_step():
    p = parse_profile("step:1000@0,5000@30,2000@60", 0)
    assert p.rate_at(29.999) == 1000.0
    assert p.rate_at(30) == 5000.0
    assert p.rate_at(61) == 2000.0
    assert p.cumulative(30) == 30000.0
    assert p.cumulative(40) == 80000.0
    assert p.cumulative(70) == 30000.0 + 150000.0 + 20000.0
    assert p.peak == 5000.0


def test_spike():
    p = parse_profile("spike:100:1000:10:2", 0)
    assert [p.rate_at(t) for t in (0, 9.9, 10, 11.9, 12, 100)] == [100, 100, 1000, 1000, 100, 100]
    assert p.cumulative(20) == 100 * 18 + 1000 * 2


def test_scaled_share():
    p = parse_profile("ramp:100:500:10", 0).scaled(0.5)
    assert p.cumulative(10) == 1500.0
    assert p.name == "ramp:100:500:10"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("wave:1", "unknown rate profile 'wave:1'"),
        ("ramp:1:2", "expected 3 numbers"),
        ("ramp:a:2:3", "are not numbers"),
        ("ramp:1:2:0", "positive duration"),
        ("step:100@5", "starts at t=0"),
        ("step:100", "each step is RATE@SECONDS"),
        ("spike:1:2:-1:3", "AT must be >= 0"),
    ],
)
def test_bad_specs_say_what_is_expected(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_profile(spec, 10.0)


def test_rates_must_be_finite_and_non_negative():
    with pytest.raises(ValueError, match="finite and >= 0"):
        RateProfile(((0.0, -1.0),))


def test_a_reporting_interval_sets_the_fleet_rate():
    from producer.settings import ProducerSettings

    s = ProducerSettings(_env_file=None, fleet_size=1_000_000, report_every_s=300)
    assert s.rate == 1_000_000 / 300 and s.profile() == RateProfile(((0.0, 1_000_000 / 300),))
    # Round robin at that rate: device i's readings are fleet_size events, 300 s, apart.
    assert ProducerSettings(_env_file=None, fleet_size=50, report_every_s=10).rate == 5.0
    # Validated again (a dump read back), the rate it set is no conflict.
    assert ProducerSettings.model_validate(s.model_dump()).rate == s.rate
    with pytest.raises(ValueError, match="set the rate or report_every_s, not both"):
        ProducerSettings(_env_file=None, rate=10, report_every_s=300)
    with pytest.raises(ValueError, match="report_every_s gives a constant rate"):
        ProducerSettings(_env_file=None, report_every_s=300, rate_profile="ramp:1:10:60")
