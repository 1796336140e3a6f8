"""Machine profiles: communication formulas, validation, the JSON cache."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from sciml.spatial_parallel.planner.calibrate import _fit
from sciml.spatial_parallel.planner.profile import (
    PROFILES,
    Profile,
    default_cache,
    get_profile,
    load_profile,
    save_profile,
)
from tests.spatial_parallel.planner.test_cost import PROFILE


def test_ring_all_reduce_closed_form() -> None:
    # 4 ranks in one node: 2 (P - 1) = 6 steps of nbytes / 4
    assert PROFILE.allreduce(4e6, 4) == pytest.approx(6 * (1e-5 + 1e6 / 1e8), rel=1e-12)
    assert PROFILE.allreduce(4e6, 1) == 0 and PROFILE.allreduce(0, 8) == 0


def test_tree_wins_for_small_messages_on_many_ranks() -> None:
    ranks = 64
    tree = 2 * math.log2(ranks) * 1e-5 + 2 * 8 / 1e8
    assert PROFILE.allreduce(8, ranks) == pytest.approx(tree, rel=1e-12)


def test_messages_leaving_the_node_use_the_network() -> None:
    h100 = PROFILES["h100"]
    assert h100.p2p(1e6, stride=1) == pytest.approx(10e-6 + 1e6 / 450e9)
    assert h100.p2p(1e6, stride=8) == pytest.approx(20e-6 + 1e6 / 50e9)
    assert h100.contention(2048) == 1.0 and PROFILE.contention(1) == 1.0
    two_cores = dataclasses.replace(PROFILE, concurrency=2)
    assert two_cores.contention(4) == 2.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("conv_rate", 0.0), ("mem_bw", -1.0), ("op_overhead", math.nan), ("concurrency", 0)],
)
def test_bad_constants_are_named(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"{field} must be a finite number"):
        dataclasses.replace(PROFILE, **{field: value})


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    path = save_profile(PROFILE, tmp_path / "deep" / "profile.json")
    assert load_profile(path) == PROFILE
    assert [p.name for p in tmp_path.joinpath("deep").iterdir()] == ["profile.json"]


def test_cache_location_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCIML_CACHE_DIR", str(tmp_path))
    assert default_cache() == tmp_path / "planner_profile.json"
    with pytest.raises(ValueError, match="run `sciml spatial plan --calibrate` first"):
        get_profile("calibrated")
    save_profile(PROFILE)
    assert get_profile("calibrated") == PROFILE


def test_a_file_that_is_not_a_profile_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"name": "x"}')
    with pytest.raises(ValueError, match="is not a planner profile of this version: expected"):
        load_profile(path)
    # a cache calibrated before the profile had sync_wait
    older = {k: v for k, v in dataclasses.asdict(PROFILE).items() if k != "sync_wait"}
    path.write_text(json.dumps(older))
    with pytest.raises(ValueError, match=r"got \[.*'source'\] .* run `sciml spatial plan"):
        load_profile(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="cannot read the planner profile"):
        get_profile(str(path))


def test_profiles_cite_their_sources() -> None:
    for profile in PROFILES.values():
        assert "data sheet" in profile.source and profile.memory == 80e9
    assert isinstance(PROFILES["a100"], Profile)


def test_calibration_fit_recovers_overhead_and_rate() -> None:
    work = [1e6, 4e6, 9e6]
    overhead, rate = _fit(work, [2e-3 + w / 5e9 for w in work])
    assert overhead == pytest.approx(2e-3, rel=1e-9) and rate == pytest.approx(5e9, rel=1e-9)
