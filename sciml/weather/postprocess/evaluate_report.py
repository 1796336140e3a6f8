"""Write an :class:`~.evaluate.Evaluation`: JSON, CSV and figures, atomically.

``sciml weather evaluate --json F --csv F --figures DIR`` calls :func:`write_evaluation`:
the JSON and CSV hold every column of the score table (NaN is ``null`` in JSON and empty
in CSV); ``DIR`` gets one figure of rank or PIT histograms per model,
``reliability_<model>.png`` (:func:`sciml.weather.plots.reliability_histograms`), and one
of the CRPS skill against the raw full ensemble by lead time per variable,
``crps_skill_<variable>.png``. Every file is written to a temporary name and renamed.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import xarray as xr
from matplotlib.figure import Figure

from sciml.io_utils import atomic_write_text, save_figure
from sciml.progress import phase
from sciml.weather.plots import reliability_histograms, scores_by_lead
from sciml.weather.postprocess.evaluate import Evaluation, logger

__all__ = ["SUMMARY", "describe", "skill_by_lead", "write_evaluation"]

#: The columns a printed or Markdown summary shows (the JSON and CSV hold all).
SUMMARY = (
    "model",
    "members",
    "seeds",
    "variable",
    "level",
    "lead_days",
    "crps",
    "crps_kind",
    "crps_skill",
    "crps_skill_std",
    "crps_efi_skill",
    "crps_extreme_skill",
    "spread_skill",
    "reliability",
)


def describe(evaluation: Evaluation) -> str:
    """One paragraph saying which CRPS is which and which dates defined the climates."""
    dates = (
        "the climate data's start dates"
        if evaluation.climate == "climate"
        else "the test data's own start dates (pass the training data as the climate for a "
        "climate independent of the test)"
    )
    return (
        "CRPS: `ensemble standard` for the raw ensembles, `gaussian closed form` for the "
        "post-processed forecasts; skills are 1 - score / score of the raw full ensemble. "
        "crps_efi weights each point by |EFI| of the raw full ensemble (ENS-10); "
        "crps_extreme is the CRPS on the points with the largest |anomaly| of the truth. "
        f"Model climate and truth climatology per lead time and grid point: {dates}. "
        "reliability: distance of the rank (raw) or PIT histogram from flat (0: flat)."
    )


def skill_by_lead(evaluation: Evaluation, variable: str) -> Figure:
    """CRPS skill against the raw full ensemble by lead time, one line per model.

    Levels (and other kept dimensions) are averaged; the single seeds of a model trained
    with several are left out (its mean row is drawn).
    """
    table = evaluation.table
    rows = table[(table.variable == variable) & ~table.model.str.contains("_seed")]
    if rows.empty:
        raise ValueError(f"no rows for variable {variable!r}; it has {sorted(set(table.variable))}")
    skill = rows.groupby(["model", "lead_days"], sort=False).crps_skill.mean()
    lines = {
        str(model): xr.DataArray(part.to_numpy(), dims="lead_time", coords={"lead_time": days})
        for model, part in skill.groupby(level="model", sort=False)
        for days in [part.index.get_level_values("lead_days").to_numpy()]
    }
    return scores_by_lead(lines, ylabel="CRPS skill vs raw full ensemble", title=variable)


def _filename(prefix: str, name: str) -> str:
    return f"{prefix}_{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.png"


def _save(fig: Figure, path: Path) -> Path:
    save_figure(fig, path, dpi=90)
    plt.close(fig)
    return path


def write_evaluation(
    evaluation: Evaluation,
    *,
    json: Path | str | None = None,
    csv: Path | str | None = None,
    figures: Path | str | None = None,
) -> list[Path]:
    """Write what is asked for (see the module docstring); return the paths written."""
    written: list[Path] = []
    table = evaluation.table
    if json is not None:
        atomic_write_text(json, table.to_json(orient="records", indent=1))
        written.append(Path(json))
    if csv is not None:
        atomic_write_text(csv, table.to_csv(index=False))
        written.append(Path(csv))
    if figures is not None:
        folder = Path(figures)
        folder.mkdir(parents=True, exist_ok=True)
        variables = list(dict.fromkeys(table.variable))
        count = len(evaluation.histograms) + len(variables)
        with phase(logger, f"drawing {count} figures into {folder}"):
            for model, histograms in evaluation.histograms.items():
                fig = reliability_histograms(histograms, title=f"{model}: rank / PIT histograms")
                written.append(_save(fig, folder / _filename("reliability", model)))
            for variable in variables:
                fig = skill_by_lead(evaluation, variable)
                written.append(_save(fig, folder / _filename("crps_skill", variable)))
    return written
