"""Weather ensembles as other tools write them, through every command that reads one.

``weather score``, ``weather split``, ``weather train`` (EMOS) and ``weather evaluate`` read
each variant of a tiny synthetic ensemble (and of the bundled ERA5 sample) in netCDF and in
Zarr: the same answer within the variant's bound, or a refusal naming the file that leaves
every input and output as it was. Hypothesis draws each kind's parameters (which aliases,
which dims reversed, which units, calendar, chunks, NaN, ...); ``make test`` runs a few of
each kind, ``make system-test`` more (``slow``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st

from sciml.cli import main
from sciml.datasets import sample_path
from sciml.weather.data import open_ensemble
from tests.file_digests import digests
from tests.inputs import variants as v
from tests.inputs.harness import QUICK, SLOW, ran, refused

#: The dims of the synthetic ensemble.
DIMS = ("member", "time", "lead_time", "level", "lat", "lon")
#: JSON tables round to 10 decimals.
JSON_ROUNDING = 1e-10
#: Scores that move by at most as much as every member and the truth do.
LIPSCHITZ = ("crps", "crps_fair", "spread", "rmse")
#: ``weather evaluate``'s scores in the data's units (the others are ratios).
EVALUATE_IN_UNITS = ("crps", "crps_efi", "crps_extreme", "rmse")


def ensemble(dates: int = 10, seed: int = 0) -> xr.Dataset:
    """3 members of ``psi`` in kelvin (and its truth) on 1 level, 4 x 8 points, 2 lead times,
    start dates every 2 days from 2001-01-01 (days of every calendar)."""
    rng = np.random.default_rng(seed)
    shape = (3, dates, 2, 1, 4, 8)
    signal = 280.0 + 5.0 * rng.standard_normal(shape[1:])
    kelvin = {"units": "K", "long_name": "temperature"}
    data = {
        "psi": (DIMS, signal + rng.standard_normal(shape), kelvin),
        "psi_truth": (DIMS[1:], signal + 0.5 * rng.standard_normal(shape[1:]), kelvin),
    }
    coords = {
        "member": np.arange(3),  # labelled, as ERA5's number: selected by label, not position
        "time": np.datetime64("2001-01-01") + np.arange(dates) * np.timedelta64(2, "D"),
        "lead_time": np.arange(2) * np.timedelta64(1, "D"),
        "level": [500],
        "lat": np.linspace(60.0, -60.0, 4),
        "lon": np.arange(8) * 45.0,
    }
    return xr.Dataset(data, coords=coords)


def _kinds(dims: tuple[str, ...], names: tuple[str, ...]) -> dict[str, st.SearchStrategy[Any]]:
    """Each variant kind: a strategy for its ``(name, function of a dataset, chunks)``."""
    alias = st.tuples(*[st.sampled_from((None, *v.ALIASES[d])) for d in dims if d in v.ALIASES])
    with_aliases = alias.filter(any).map(
        lambda names: dict(zip([d for d in dims if d in v.ALIASES], names, strict=True))
    )
    return {
        "aliases": with_aliases.map(
            lambda names: (f"aliases {names}", lambda ds: v.aliases(ds, names), None)
        ),
        "reordered": st.permutations(dims).map(
            lambda order: (f"dims {order}", lambda ds: v.reordered(ds, order), None)
        ),
        "reversed": st.lists(st.sampled_from(dims), min_size=1, max_size=3, unique=True).map(
            lambda flip: (f"reversed {flip}", lambda ds: v.reversed_coords(ds, flip), None)
        ),
        "shifted longitudes": st.just(("lon -180..180", v.shifted_longitudes, None)),
        "shifted times": st.integers(-400, 400)
        .filter(bool)
        .map(lambda days: (f"time + {days} days", lambda ds: v.shifted_times(ds, days), None)),
        "units": st.sampled_from(("degC", "degF", "mK")).map(
            lambda units: (f"in {units}", lambda ds: v.in_units(ds, units), None)
        ),
        "calendar": st.sampled_from(v.CALENDARS).map(
            lambda cal: (f"calendar {cal}", lambda ds: v.in_calendar(ds, cal), None)
        ),
        "packed": st.just(("int16", v.packed, None)),
        "chunked": st.dictionaries(st.sampled_from(dims), st.integers(1, 3), min_size=1).map(
            lambda chunks: (f"chunks {chunks}", lambda ds: (ds, v.SAME), chunks)
        ),
        "extra variables": st.just(("extra variables", v.extra_variables, None)),
        "masked forecast": st.lists(st.integers(0, 99), min_size=6, max_size=6).map(
            lambda at: (f"NaN in {names[0]} at {at}", lambda ds: v.masked(ds, names[0], at), None)
        ),
        "masked truth": st.lists(st.integers(0, 99), min_size=6, max_size=6).map(
            lambda at: (f"NaN in {names[-1]} at {at}", lambda ds: v.masked(ds, names[-1], at), None)
        ),
        "emptied": st.sampled_from(dims).map(
            lambda dim: (f"no {dim}", lambda ds: v.emptied(ds, dim), None)
        ),
    }


KINDS = _kinds(DIMS, ("psi", "psi_truth"))
#: File-level kinds: applied to the written variant, in one format.
FILE_KINDS = {"truncated netCDF": "nc", "truncated Zarr": "zarr"}


def _variant(
    data: st.DataObject, kind: str, base: xr.Dataset, folder: Path, kinds: dict[str, Any]
) -> tuple[str, Path, v.Expect]:
    """Draw a variant of ``base`` of ``kind``, written to ``folder`` (netCDF or Zarr)."""
    if kind in FILE_KINDS:
        fmt = FILE_KINDS[kind]
        fraction = data.draw(st.floats(0.05, 0.95), label="fraction")
        path = v.write(base, folder / "variant", fmt)
        # in the field every command reads: a chunk of another is read by fewer of them
        expect = v.truncated(path, fraction, within=v.fields(base)[0] if fmt == "zarr" else "")
        return f"{fmt} truncated to {fraction:.2f}", path, expect
    fmt = data.draw(st.sampled_from(("nc", "zarr")), label="format")
    name, change, chunks = data.draw(kinds[kind], label=kind)
    changed, expect = change(base)
    return f"{fmt} {name}", v.write(changed, folder / "variant", fmt, chunks), expect


def _rows(table: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[tuple[Any, ...], dict]:
    return {tuple(row[k] for k in keys): row for row in table}


def _compare(
    base: list[dict[str, Any]],
    got: list[dict[str, Any]],
    expect: v.Expect,
    keys: tuple[str, ...],
    *,
    scores: Callable[[dict[str, Any]], tuple[str, ...]],
    scale: float = 1.0,
) -> None:
    """Rows of ``got`` match ``base`` by ``keys``; each of ``scores(row)`` within the bound."""
    want, have = _rows(base, keys), _rows(got, keys)
    assert sorted(have, key=str) == sorted(want, key=str)
    for key, row in want.items():
        for name in scores(row):
            if row[name] is None:
                assert have[key][name] is None
                continue
            bound = expect.bound * scale + 2 * JSON_ROUNDING + 1e-12 * abs(row[name])
            assert abs(have[key][name] - scale * row[name]) <= bound, (key, name)


def _numbers(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(k for k, x in row.items() if isinstance(x, float) or x is None)


# -- the commands ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The valid inputs, an EMOS run trained on them and each command's answers."""
    folder = tmp_path_factory.mktemp("weather_base")
    ds = ensemble()
    path = v.write(ds, folder / "base", "nc")
    run = folder / "run"
    argv = ["weather", "train", "--model", "emos", "--members", "2", "--quiet"]
    assert main([*argv, "--run-dir", str(run), str(path)]) == 0
    assert (
        main(
            [
                "weather",
                "evaluate",
                "--run-dir",
                str(run),
                "--json",
                str(folder / "e.json"),
                str(path),
            ]
        )
        == 0
    )
    assert (
        main(["weather", "score", str(path), "--variable", "psi", "--json", str(folder / "s.json")])
        == 0
    )
    assert main(["weather", "split", str(path), "--out", str(folder / "split")]) == 0
    return Base(
        ds=ds,
        kinds=KINDS,
        variable="psi",
        path=path,
        run=run,
        evaluate=v.read_table(folder / "e.json"),
        score=v.read_table(folder / "s.json"),
        split=_split_dates(folder / "split"),
    )


class Base(dict[str, Any]):
    """The valid inputs and their answers (shown by name only in a failure's report)."""

    def __repr__(self) -> str:
        return f"Base({self['path']})"


def _split_dates(folder: Path) -> dict[str, int]:
    found = {}
    for part in ("train", "validation", "test"):
        with open_ensemble(folder / f"{part}.nc") as ds:
            found[part] = ds.sizes["time"]
    return found


def check_score(
    data: st.DataObject, kind: str, base: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        name, path, expect = _variant(data, kind, base["ds"], folder, base["kinds"])
        out = folder / "score.json"
        argv = ["weather", "score", str(path), "--variable", base["variable"], "--json", str(out)]
        if expect.refuse:
            refused(argv, capsys, path, path, out)
            return
        assert ran(argv, path) == 0, f"{name}: {capsys.readouterr().err[-2000:]}"
        table = v.read_table(out)
        keys = tuple(key for key in ("lead_time",) if key in table[0])
        _compare(
            base["score"], table, expect, keys, scores=lambda row: LIPSCHITZ, scale=expect.scale
        )
        if not expect.lossy:  # ratios: the same in any units
            _compare(base["score"], table, expect, keys, scores=_ratios)


def _ratios(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(name for name in _numbers(row) if name not in LIPSCHITZ)


def check_evaluate(
    data: st.DataObject, kind: str, base: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        name, path, expect = _variant(data, kind, base["ds"], folder, KINDS)
        out, run = folder / "evaluate.json", base["run"]
        argv = ["weather", "evaluate", "--run-dir", str(run), "--json", str(out), str(path)]
        if expect.refuse:
            refused(argv, capsys, path, path, run, out)
            return
        before = digests(run)
        code = ran(argv, path)
        assert digests(run) == before, "evaluate changed its run folder"
        if code == 1 and expect.grid:
            assert str(path) in capsys.readouterr().err
            return
        assert code == 0, f"{name}: {capsys.readouterr().err[-2000:]}"
        # results come back in the test data's own units: the scores in those units scale
        keys = ("model", "variable", "level", "lead_days")
        lossy = expect.lossy
        want = [row for row in base["evaluate"] if not lossy or row["model"].startswith("raw")]
        got = [row for row in v.read_table(out) if not lossy or row["model"].startswith("raw")]
        dimensional = ("crps", "rmse") if lossy else EVALUATE_IN_UNITS
        _compare(want, got, expect, keys, scores=lambda row: dimensional, scale=expect.scale)
        if not lossy:
            unitless = [k for k in _numbers(want[0]) if k not in EVALUATE_IN_UNITS]
            _compare(want, got, expect, keys, scores=lambda row: tuple(unitless))


def check_train(
    data: st.DataObject, kind: str, base: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        name, path, expect = _variant(data, kind, base["ds"], folder, KINDS)
        run = folder / "run"
        argv = ["weather", "train", "--model", "emos", "--members", "2", "--quiet"]
        argv += ["--run-dir", str(run), str(path)]
        if expect.refuse:
            refused(argv, capsys, path, path, run)
            return
        assert ran(argv, path) == 0, f"{name}: {capsys.readouterr().err[-2000:]}"
        # the run's answer: its scores on the valid test data
        out = folder / "evaluate.json"
        argv = ["weather", "evaluate", "--run-dir", str(run), "--json", str(out)]
        code = main([*argv, str(base["path"])])
        if code == 1 and expect.grid:
            assert str(base["path"]) in capsys.readouterr().err
            return
        assert code == 0, f"{name}: {capsys.readouterr().err[-2000:]}"
        table = v.read_table(out)
        if expect.lossy:
            assert len(table) == len(base["evaluate"])
            return
        _compare(
            base["evaluate"],
            table,
            v.with_bound(expect, 1e-7),  # EMOS's fit stops within its optimiser's tolerance
            ("model", "variable", "level", "lead_days"),
            scores=_numbers,
            scale=1.0,
        )


def check_split(
    data: st.DataObject, kind: str, base: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        name, path, expect = _variant(data, kind, base["ds"], folder, base["kinds"])
        out = folder / "split"
        argv = ["weather", "split", str(path), "--out", str(out)]
        if kind.startswith("masked"):  # split computes nothing: missing values go along
            expect = v.SAME
        if expect.refuse:
            refused(argv, capsys, path, path, out)
            return
        assert ran(argv, path) == 0, f"{name}: {capsys.readouterr().err[-2000:]}"
        assert _split_dates(out) == base["split"], name


CHECKS = {
    "score": check_score,
    "evaluate": check_evaluate,
    "train": check_train,
    "split": check_split,
}
#: Known defects, each named: the case fails until it is fixed (then strict xfail fails).
DEFECTS: dict[tuple[str, str], str] = {}
KIND_NAMES = [*KINDS, *FILE_KINDS]


#: ``make test`` trains on these kinds only (training is the costliest check); all: slow.
QUICK_TRAIN = ("aliases", "reversed", "units", "calendar", "masked forecast", "emptied")


def _cases(*, quick: bool = False) -> list[Any]:
    cases = []
    for command in CHECKS:
        for kind in KIND_NAMES:
            if quick and command == "train" and kind not in QUICK_TRAIN:
                continue
            reason = DEFECTS.get((command, kind)) or DEFECTS.get(("*", kind))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            cases.append(pytest.param(command, kind, marks=marks, id=f"{command}-{kind}"))
    return cases


@pytest.mark.parametrize(("command", "kind"), _cases(quick=True))
@QUICK
@given(data=st.data())
def test_weather_variants(
    command: str,
    kind: str,
    data: st.DataObject,
    base: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    CHECKS[command](data, kind, base, capsys)


@pytest.mark.slow
@pytest.mark.parametrize(("command", "kind"), _cases())
@SLOW
@given(data=st.data())
def test_weather_variants_explored(
    command: str,
    kind: str,
    data: st.DataObject,
    base: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    CHECKS[command](data, kind, base, capsys)


# -- the bundled ERA5 sample (ERA5's names, float32, no truth: members against the others) --

#: The sample's dims once read, and the kinds that apply to a file without truth or lead time.
ERA5_DIMS = ("member", "time", "level", "lat", "lon")
ERA5_KINDS = _kinds(ERA5_DIMS, ("t",))
ERA5_CHECKS = {"score": check_score, "split": check_split}


@pytest.fixture(scope="module")
def era5(tmp_path_factory: pytest.TempPathFactory) -> Base:
    """The bundled sample's temperature, read with the project's names, and its answers."""
    from sciml.weather.data import standardise_names

    folder = tmp_path_factory.mktemp("era5_base")
    with xr.open_dataset(sample_path("era5_ensemble")) as opened:
        ds = standardise_names(opened[["t"]].load()).drop_vars("valid_time")
    path = v.write(ds, folder / "era5", "nc")
    out = folder / "s.json"
    assert main(["weather", "score", str(path), "--variable", "t", "--json", str(out)]) == 0
    assert main(["weather", "split", str(path), "--out", str(folder / "split")]) == 0
    return Base(
        ds=ds,
        kinds=ERA5_KINDS,
        variable="t",
        path=path,
        score=v.read_table(out),
        split=_split_dates(folder / "split"),
    )


def _era5_cases() -> list[Any]:
    cases = []
    for command in ERA5_CHECKS:
        for kind in [*ERA5_KINDS, "truncated netCDF"]:
            if kind == "masked truth":
                continue  # no truth: the sample's one field is "masked forecast"
            reason = DEFECTS.get((command, kind)) or DEFECTS.get(("*", kind))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            cases.append(pytest.param(command, kind, marks=marks, id=f"{command}-{kind}"))
    return cases


@pytest.mark.slow
@pytest.mark.parametrize(("command", "kind"), _era5_cases())
@QUICK
@given(data=st.data())
def test_era5_sample_variants(
    command: str, kind: str, data: st.DataObject, era5: Base, capsys: pytest.CaptureFixture[str]
) -> None:
    ERA5_CHECKS[command](data, kind, era5, capsys)
