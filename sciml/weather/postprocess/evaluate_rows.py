"""The runs an evaluation scores and the rows of its table (:mod:`.evaluate`'s parts).

:func:`name_runs` names each run and groups the seeds of one model, :func:`combined` adds
each group's combined forecast, :func:`table_rows` turns a forecast's scores into table rows,
and :func:`with_skills` and :func:`with_seeds` add the skill columns and the seed groups'
rows. Both ways of scoring (:func:`~.evaluate.score_runs` on the whole file and
:func:`~.evaluate_blocks.score_blocks` a block at a time) share them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from sciml.training.runs.record import config_record
from sciml.weather.data import refuse_missing
from sciml.weather.postprocess.config import PostprocessConfig
from sciml.weather.postprocess.predict import Forecast, combine_seeds

__all__ = [
    "SCORES",
    "SKILLS",
    "ScoredRun",
    "check_data",
    "combined",
    "name_runs",
    "refuse_missing_scored",
    "table_rows",
    "with_seeds",
    "with_skills",
]

#: Score columns: each has a ``<score>_std`` over seeds.
SCORES = (
    "crps",
    "crps_skill",
    "crps_efi",
    "crps_efi_skill",
    "crps_extreme",
    "crps_extreme_skill",
    "rmse",
    "spread_skill",
    "reliability",
)
SKILLS = {"crps_skill": "crps", "crps_efi_skill": "crps_efi", "crps_extreme_skill": "crps_extreme"}


@dataclass(frozen=True)
class ScoredRun:
    """A run as the table names it: its folder, configuration, row name and seed group."""

    path: Path
    config: PostprocessConfig
    name: str
    group: str | None  # the aggregated row's name when the run is one of several seeds
    seeds: int = 1  # the seeds a forecast combines


def refuse_missing_scored(
    runs: list[ScoredRun], ensemble: xr.DataArray, truth: xr.DataArray, data: str
) -> None:
    """Refuse missing (NaN) test values when a run was trained to refuse them.

    A run trained with ``--missing mask`` scores the points present; one trained with
    ``--missing refuse`` would be scored, and the raw ensembles beside it, over fewer
    points than asked, unsaid.

    Args:
        runs: The runs evaluated.
        ensemble: The test ensemble of a variable (a block of it).
        truth: Its verifying values.
        data: How messages name the test data (its file).

    Raises:
        ValueError: Naming the runs, each variable with missing values, its file, how many
            points and the first of them.
    """
    refusing = [str(run.path) for run in runs if run.config.missing == "refuse"]
    if refusing:
        values = xr.Dataset({ensemble.name: ensemble, truth.name: truth})
        for name in values.data_vars:  # named by the test file (``data``) once read
            values[name].encoding.setdefault("source", data)
        refuse_missing(
            values,
            [str(name) for name in values.data_vars],
            advice=f"the run(s) in {', '.join(refusing)} (--run-dir) were trained with "
            "--missing refuse: fill them, or evaluate runs trained with --missing mask",
        )


def name_runs(runs: list[tuple[Path, PostprocessConfig]]) -> list[ScoredRun]:
    """Name each run; runs that differ only by seed share a group (the module docstring)."""
    groups: dict[PostprocessConfig, list[tuple[Path, PostprocessConfig]]] = {}
    for path, config in runs:
        groups.setdefault(replace(config, train=replace(config.train, seed=0)), []).append(
            (path, config)
        )
    bases = {key: f"{key.model}_{key.members}" for key in groups}
    names = dict(bases)
    for base in set(bases.values()):
        alike = [key for key in groups if bases[key] == base]
        if len(alike) > 1:
            names |= {
                key: f"{base}_{part}" for key, part in zip(alike, _distinct(alike), strict=True)
            }
    named: list[ScoredRun] = []
    for key, members in groups.items():
        seeds = [config.train.seed for _, config in members]
        if len(set(seeds)) < len(seeds):
            paths = [str(path) for path, _ in members]
            raise ValueError(f"runs {paths} have the same configuration and seed: pass one of them")
        single = len(members) == 1
        for path, config in members:
            run_name = names[key] if single else f"{names[key]}_seed{config.train.seed}"
            named.append(ScoredRun(path, config, run_name, None if single else names[key]))
    if len({run.name for run in named}) < len(named):
        raise ValueError(
            f"runs {[str(r.path) for r in named]} give ambiguous names; rename a folder"
        )
    return named


def _distinct(configs: list[PostprocessConfig]) -> list[str]:
    """Each configuration's values of the fields in which they differ, e.g. ``lr0.003-epochs30``."""
    flat = [
        {k: v for k, v in config_record(c).items() if k != "train"} | config_record(c)["train"]
        for c in configs
    ]
    fields = [f for f in flat[0] if len({repr(values[f]) for values in flat}) > 1]

    def text(value: object) -> str:
        if isinstance(value, (tuple, list)):
            return ",".join(map(str, value))
        return str(value)

    return ["-".join(f"{f}{text(values[f])}" for f in fields) for values in flat]


def check_data(test: xr.Dataset, variables: list[str], what: str) -> None:
    """Refuse data (named ``what``) without a variable, its truth, or a sample dim."""
    missing = [v for v in variables if v not in test.data_vars or f"{v}_truth" not in test]
    if missing:
        raise ValueError(f"{what} lack {missing} (or their _truth)")
    for var in variables:
        absent = [d for d in ("member", "time", "lead_time") if d not in test[var].dims]
        if absent:
            raise ValueError(f"{var} of {what} has no {absent} dimension(s): {test[var].dims}")


def combined(runs: list[ScoredRun], forecasts: list[Forecast]) -> list[tuple[ScoredRun, Forecast]]:
    """Each seed group's forecasts combined into one, as a run named ``<group>_combined``."""
    groups: dict[str, list[int]] = {}
    for index, run in enumerate(runs):
        if run.group is not None:
            groups.setdefault(run.group, []).append(index)
    out = []
    for group, indices in groups.items():
        first = runs[indices[0]]
        run = ScoredRun(first.path, first.config, f"{group}_combined", None, seeds=len(indices))
        out.append((run, combine_seeds([forecasts[i] for i in indices])))
    return out


def table_rows(
    name: str, members: int, seeds: int, var: str, scores: xr.Dataset, kind: str
) -> list[dict]:
    """The table's rows of one forecast's ``scores`` of ``var``, one per lead time (and level)."""
    rows = []
    for record in scores.drop_attrs().to_dataframe().reset_index().to_dict("records"):
        lead = record.pop("lead_time")
        days = lead if isinstance(lead, float) else pd.Timedelta(lead) / pd.Timedelta(days=1)
        rows.append(
            {"model": name, "members": members, "seeds": seeds, "variable": var}
            | {"lead_days": days, **record, "crps_kind": kind}
        )
    return rows


def with_skills(table: pd.DataFrame, keep: list[str], full: int) -> pd.DataFrame:
    """Add each ``*_skill`` column against the ``raw_<full>`` row of the same key."""
    key = ["variable", *[c for c in table.columns if c in keep and c != "lead_time"], "lead_days"]
    index = table.set_index(key).index
    raw = table[table.model == f"raw_{full}"].set_index(key)
    for skill, score in SKILLS.items():
        table[skill] = 1 - table[score] / raw[score].reindex(index).to_numpy()
    order = ["model", "members", "seeds", *key, "crps_kind"]
    return table[order + list(SCORES)]


def with_seeds(table: pd.DataFrame, runs: list[ScoredRun]) -> pd.DataFrame:
    """Append each seed group's mean row, with ``<score>_std`` columns over its seeds."""
    for score in SCORES:
        table[f"{score}_std"] = np.nan
    groups = {run.group: [r.name for r in runs if r.group == run.group] for run in runs}
    key = [c for c in table.columns if c not in (*SCORES, "model", "seeds") and "_std" not in c]
    parts = [table]
    for group, names in groups.items():
        if group is None:
            continue
        seeds = table[table.model.isin(names)]
        grouped = seeds.groupby(key, sort=False, dropna=False)[list(SCORES)]
        mean, std = grouped.mean(), grouped.std(ddof=1).add_suffix("_std")
        rows = mean.join(std).reset_index().assign(model=group, seeds=len(names))
        parts.append(rows[table.columns])
    return pd.concat(parts, ignore_index=True)
