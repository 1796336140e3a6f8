"""Volume stores as other tools write them, through ``sciml cosmoflow train``.

A tiny store of sciml's writer, written again by plain xarray (other chunks, Zarr 3,
float32, another variable, channels last) trains to the same loss and statistics; a store
of no samples, a chunk truncated, a byte changed or a sample rewritten with zarr is refused
naming the store, before the run folder is written.
"""

from __future__ import annotations

import csv
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st

from sciml.volumes.data import write_cosmology
from sciml.volumes.volume_record import recorded_stats
from tests.inputs import variants as v
from tests.inputs.harness import QUICK, SLOW, ran, refused

pytestmark = pytest.mark.xdist_group("volumes_cli")

TINY = ["--epochs", "1", "--batch-size", "2", "--width", "2", "--levels", "1", "--workers", "0"]


def _argv(data: Path, run: Path) -> list[str]:
    return ["cosmoflow", "train", str(data), "--run-dir", str(run), "--no-progress", *TINY]


def _answer(run: Path) -> dict[str, Any]:
    """A run's answer: its normalisation statistics and its epoch's loss."""
    with open(run / "metrics.csv") as handle:
        rows = [row for row in csv.DictReader(handle) if row["split"] == "epoch"]
    losses = {row["metric"]: float(row["value"]) for row in rows}
    stats = recorded_stats(run)
    assert stats is not None
    return {"norm": stats.record(), "loss": losses}


def _close(a: Any, b: Any, rel: float) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rel) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)
    return bool(a == b)


class Base(dict[str, Any]):
    def __repr__(self) -> str:
        return f"Base({self['store']})"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    folder = tmp_path_factory.mktemp("volumes_base")
    store = write_cosmology(folder / "good.zarr", samples=2, size=4)
    run = folder / "run"
    assert ran(_argv(store, run), store) == 0
    with xr.open_zarr(store) as ds:
        loaded = ds.load()
    return Base(store=store, ds=loaded, answer=_answer(run))


#: Each kind: a strategy for ``(name, function of (base, folder) -> (store, Expect))``.
KINDS: dict[str, st.SearchStrategy[Any]] = {
    "rechunked": st.tuples(*[st.sampled_from((1, 2, 4))] * 5).map(
        lambda chunks: (
            f"chunks {chunks}",
            lambda b, f: v.rewritten_store(b["ds"], f / "s.zarr", chunks=chunks),
        )
    ),
    "zarr 3": st.just(
        ("zarr 3", lambda b, f: v.rewritten_store(b["ds"], f / "s.zarr", zarr_format=3))
    ),
    "other dtype": st.sampled_from(("int32", "float32", "float64")).map(
        lambda dtype: (dtype, lambda b, f: v.rewritten_store(b["ds"], f / "s.zarr", dtype=dtype))
    ),
    "extra variable": st.just(
        ("extra variable", lambda b, f: v.store_with_extra_variable(b["ds"], f / "s.zarr"))
    ),
    "channels last": st.just(
        ("channels last", lambda b, f: v.channels_last_store(b["ds"], f / "s.zarr"))
    ),
    "emptied": st.just(("no samples", lambda b, f: v.emptied_store(b["ds"], f / "s.zarr"))),
    "truncated": st.tuples(st.integers(0, 10**6), st.floats(0.0, 0.95)).map(
        lambda at: (
            f"chunk {at[0]} cut to {at[1]:.2f}",
            lambda b, f: _in_copy(b, f, v.truncated, *at),
        )
    ),
    "edited in place": st.tuples(st.integers(0, 10**6), st.floats(0.0, 1.0)).map(
        lambda at: (
            f"chunk {at[0]} byte at {at[1]:.2f}",
            lambda b, f: _in_copy(b, f, v.edited_in_place, *at),
        )
    ),
    "rewritten with zarr": st.tuples(st.integers(0, 9), st.floats(-5, 5, allow_nan=False)).map(
        lambda at: (
            f"sample {at[0]} set to {at[1]}",
            lambda b, f: _copy_then(b, f, lambda s: v.rewritten_in_place(s, *at)),
        )
    ),
}


def _copy_then(base: Base, folder: Path, change: Any) -> tuple[Path, v.Expect]:
    store = Path(shutil.copytree(base["store"], folder / "s.zarr"))
    return store, change(store)


def _in_copy(
    base: Base, folder: Path, change: Any, index: int, amount: float
) -> tuple[Path, v.Expect]:
    """A copy of the store whose chunk ``index`` (modulo their count) is changed."""
    store = Path(shutil.copytree(base["store"], folder / "s.zarr"))
    chunks = v.chunk_files(store)
    return store, change(chunks[index % len(chunks)], amount)


def check_train(
    data: st.DataObject, kind: str, base: Base, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        name, make = data.draw(KINDS[kind], label=kind)
        store, expect = make(base, folder)
        run = folder / "run"
        if expect.refuse:
            refused(_argv(store, run), capsys, store, store, run)
            return
        code = ran(_argv(store, run), store)
        err = capsys.readouterr().err
        if code == 1 and expect.grid:
            assert str(store) in err, err[-2000:]
            return
        assert code == 0, f"{name}: {err[-2000:]}"
        # the same values read in other chunks: float32 sums in another order at most
        assert _close(_answer(run), base["answer"], 1e-5), (name, _answer(run), base["answer"])


@pytest.mark.parametrize("kind", list(KINDS))
@QUICK
@given(data=st.data())
def test_volume_store_variants(
    kind: str, data: st.DataObject, base: Base, capsys: pytest.CaptureFixture[str]
) -> None:
    check_train(data, kind, base, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
@SLOW
@given(data=st.data())
def test_volume_store_variants_explored(
    kind: str, data: st.DataObject, base: Base, capsys: pytest.CaptureFixture[str]
) -> None:
    check_train(data, kind, base, capsys)
