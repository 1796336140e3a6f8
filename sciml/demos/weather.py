"""``sciml demo`` section: ensemble scores, and post-processing from half the members.

The real ERA5 ensemble sample and a toy QG ensemble are scored; then a small
imperfect-model toy ensemble is post-processed (EMOS and a per-grid-point MLP from half the
members) and scored with ``sciml weather evaluate``'s table.
"""

from __future__ import annotations

import pathlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from matplotlib.figure import Figure

from sciml.datasets import sample_path
from sciml.demos.report import save_figure
from sciml.distributed import torch_threads
from sciml.io_utils import markdown_table


def _save(fig: Figure, outdir: Path, name: str) -> str:
    return save_figure(fig, outdir, name, dpi=80)


def _table(frame: pd.DataFrame) -> str:
    rows = [[str(index), *row] for index, row in zip(frame.index, frame.to_numpy(), strict=True)]
    return markdown_table([frame.index.name or "", *frame.columns], rows, floats=".4g")


def demo(outdir: pathlib.Path, *, quick: bool = False) -> str:
    """Write the weather figures under ``outdir/weather`` and return the Markdown section."""
    from sciml.weather import metrics, plots
    from sciml.weather.data import open_ensemble
    from sciml.weather.toy.ensemble import generate_ensemble, write_ensemble
    from sciml.weather.verify import leave_one_out_scores, score_summary

    figdir = Path(outdir) / "weather"
    figdir.mkdir(parents=True, exist_ok=True)
    lines = ["## Ensemble weather: data and verification", ""]

    era5_path = sample_path("era5_ensemble")
    era5 = open_ensemble(era5_path, variables=["t"], levels=[850])["t"].isel(level=0).load()
    weights = metrics.latitude_weights(era5)
    loo = leave_one_out_scores(era5, dim=["lat", "lon"], weights=weights).compute()
    loo_table = loo.to_dataframe()[["crps", "crps_fair", "spread", "rmse"]]
    loo_table.index = [str(t)[:16] for t in loo_table.index]
    loo_table.index.name = "time"
    control = era5.isel(member=0, drop=True)
    others = era5.isel(member=slice(1, None))
    maps = _save(
        plots.ensemble_maps(
            control.isel(time=0),
            others.isel(time=0),
            title="ERA5 T850, members 1-9 against member 0",
        ),
        figdir,
        "era5_maps.png",
    )
    per_member = metrics.rank_histogram(control, others)
    ranks = _save(
        plots.rank_histogram_plot(per_member, title="ERA5 T850: rank of member 0"),
        figdir,
        "era5_rank_member0.png",
    )
    lines += [
        f"Real ERA5 sample (`{era5_path.name}`, 10 members, T850, cos-latitude weights). No truth "
        "ships with it, so each member is verified against the other nine (leave-one-out; "
        "the pooled spread-skill ratio is 1 by construction and is not shown):",
        "",
        _table(loo_table),
        "",
        f"![ERA5 maps](weather/{maps})",
        "",
        f"![ERA5 member-0 ranks](weather/{ranks})",
        "",
    ]

    size: dict[str, Any] = (
        {"members": 5, "start_dates": 3, "lead_times": (0, 2, 4), "spin_up": 30.0}
        if quick
        else {"members": 10, "start_dates": 12, "lead_times": (0, 1, 2, 3, 4, 6, 8)}
    )
    toy = generate_ensemble(seed=0, **size)
    write_ensemble(toy, figdir / "toy_ensemble.nc")
    dims = ["time", "level", "lat", "lon"]
    scores = score_summary(toy["psi_truth"], toy["psi"], dim=dims)
    table = scores.to_dataframe()
    table.index = [f"{lead / np.timedelta64(1, 'D'):g} d" for lead in table.index]
    table.index.name = "lead"
    by_lead = _save(
        plots.scores_by_lead(
            {
                "CRPS": scores["crps"],
                "fair CRPS": scores["crps_fair"],
                "spread": scores["spread"],
                "RMSE of mean": scores["rmse"],
            },
            ylabel="streamfunction",
            title="toy QG ensemble",
        ),
        figdir,
        "toy_scores_by_lead.png",
    )
    hist = metrics.rank_histogram(toy["psi_truth"], toy["psi"], dim=dims)
    hist_fig = _save(
        plots.rank_histogram_plot(hist.isel(lead_time=[1, -1])), figdir, "toy_rank_histograms.png"
    )
    skill = _save(
        plots.spread_skill_plot(
            toy["psi_truth"].isel(lead_time=-1),
            toy["psi"].isel(lead_time=-1),
            title="toy: spread-skill at the last lead",
        ),
        figdir,
        "toy_spread_skill.png",
    )
    lead = toy["lead_time"].values[-2]
    toy_maps = _save(
        plots.ensemble_maps(
            toy["psi_truth"].sel(lead_time=lead).isel(time=0, level=0),
            toy["psi"].sel(lead_time=lead).isel(time=0, level=0),
            title=f"toy QG upper-layer streamfunction, lead {lead / np.timedelta64(1, 'D'):g} d",
        ),
        figdir,
        "toy_maps.png",
    )
    lines += [
        f"Toy two-layer QG ensemble ({size['members']} members, {size['start_dates']} start "
        "dates, perfect model, perturbed initial conditions; file `weather/toy_ensemble.nc`) "
        "scored against its truth: spread and error grow together with lead time, and the "
        "corrected spread-skill ratio stays near 1.",
        "",
        _table(table),
        "",
        f"![scores by lead]({'weather/' + by_lead})",
        "",
        f"![rank histograms]({'weather/' + hist_fig})",
        "",
        f"![spread-skill]({'weather/' + skill})",
        "",
        f"![maps]({'weather/' + toy_maps})",
        "",
        *_postprocessing(figdir, quick=quick),
    ]
    return "\n".join(lines)


def _train_runs(train: xr.Dataset, folder: Path, *, k: int, epochs: int) -> list[Path]:
    """EMOS on ``k`` and on every member, an MLP on ``k``: their run folders.

    The models are small (the MLP has about 2,000 weights, applied point by point): they
    train on one torch thread, as the QG integration and EMOS do. With the default of one
    thread per core, the MLP's threads wait on each other: more CPU time and more wall time
    than on one thread.
    """
    from sciml.demos import DemoInterrupted
    from sciml.training import TrainConfig
    from sciml.weather.postprocess.config import PostprocessConfig
    from sciml.weather.postprocess.train import train_postprocessor

    runs = []
    for model, members in (("emos", k), ("emos", train.sizes["member"]), ("mlp", k)):
        run = folder / f"{model}_{members}"
        with torch_threads(1):
            status = train_postprocessor(
                train,
                PostprocessConfig(
                    model=model,
                    members=members,
                    train=TrainConfig(epochs=epochs, progress=False, tensorboard=False),
                ),
                run,
            )
        if status == "interrupted":
            raise DemoInterrupted("weather", f"run folder {run}")
        runs.append(run)
    return runs


def _summary(table: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Scores per model averaged over the rows; skills of the averages against ``reference``."""
    scores = ["crps", "crps_efi", "crps_extreme"]
    summary = table.groupby("model", sort=False)[[*scores, "spread_skill", "reliability"]].mean()
    for score in scores:
        skill = 1 - summary[score] / summary.loc[reference, score]
        summary.insert(summary.columns.get_loc(score) + 1, f"{score}_skill", skill)
    return summary


def _postprocessing(figdir: Path, *, quick: bool) -> list[str]:
    """Train EMOS and an MLP on half the members of an imperfect toy; the evaluate table."""
    from sciml.weather import plots
    from sciml.weather.postprocess.evaluate import score_runs
    from sciml.weather.postprocess.evaluate_report import describe, skill_by_lead
    from sciml.weather.toy.ensemble import generate_ensemble
    from sciml.weather.toy.presets import toy_preset

    preset = toy_preset("qg-imperfect-v1")
    size: dict[str, Any] = (
        {"members": 4, "start_dates": 8, "lead_times": (0, 2), "spin_up": 10.0}
        if quick
        else {"members": 10, "start_dates": 30, "lead_times": (0, 2, 4), "spin_up": 60.0}
    )
    toy = generate_ensemble(
        **size,
        spread_factor=preset.settings.spread_factor,
        seed=preset.settings.seed,
        params=preset.params,
        forecast_params=preset.forecast_params,
    )
    times = toy["time"].values
    train, test = toy.sel(time=times[:-2]), toy.sel(time=times[-2:])
    k, epochs = size["members"] // 2, 2 if quick else 20
    runs = _train_runs(train, figdir / "runs", k=k, epochs=epochs)
    evaluation = score_runs(runs, test, climate=train)
    skill = _save(skill_by_lead(evaluation, "psi"), figdir, "postprocess_skill.png")
    pit = _save(
        plots.reliability_histograms(evaluation.histograms[f"mlp_{k}"], title=f"mlp_{k}: PIT"),
        figdir,
        "postprocess_pit.png",
    )
    return [
        "### Post-processing from half the members",
        "",
        f"A toy ensemble of the `{preset.name}` configuration (the members "
        "run a model with weaker drag and shear and smoothed topography, from under-dispersive "
        f"perturbations; {size['members']} members, {times.size} start dates, the last 2 "
        f"for testing), EMOS on {k} and on {size['members']} members and a per-grid-point "
        f"MLP on {k} members ({epochs} epochs), scored on the test dates as `sciml weather "
        "evaluate` scores them, averaged over variables, levels and lead times (the skills "
        "are those of the averages). "
        + describe(evaluation)
        + (" Sizes this small show the workflow, not the models' skill." if quick else ""),
        "",
        _table(_summary(evaluation.table, f"raw_{size['members']}")),
        "",
        f"![CRPS skill](weather/{skill})",
        "",
        f"![MLP PIT histograms](weather/{pit})",
    ]
