"""The table of post-processing models: what ``sciml weather train --model`` can train.

One entry (:class:`PostprocessModel`) per model says everything the rest of the package
asks of it: its name, whether it is a deep model (trained by the loop, with checkpoints,
validation dates, static fields and the grid) or a closed-form fit such as EMOS (fitted on
every date, its parameters kept in ``<name>.nc`` in the run folder), how it is built or
fitted, and how a fitted one forecasts. The options read :data:`MODELS` (``--model``'s
choices, :class:`~sciml.weather.postprocess.config.PostprocessConfig`'s checks), the
trainer (:mod:`~sciml.weather.postprocess.train`) builds or fits through it, and the
prediction that the evaluation scores (:mod:`~sciml.weather.postprocess.predict`)
forecasts through it.

Adding a model is one module and one entry in :data:`MODELS`; :func:`registered` adds one
for a block and removes it after (a test's toy model). An entry names its functions as
``"module:function"``, imported when used, so that the command line lists the models
without importing torch.

A deep model's ``build(config, channels)`` returns a
:class:`~sciml.weather.postprocess.models.GaussianPostProcessor`; a closed-form model's
``fit(train, config)`` returns its parameters as an ``xarray.Dataset`` and
``forecast(params, config, test, *, source)`` the ``(mu, sigma)`` of every variable of
the configuration on ``test`` (``source``: the parameters' file, for messages).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["MODELS", "PostprocessModel", "model_entry", "registered"]


@dataclass(frozen=True)
class PostprocessModel:
    """One post-processing model of :data:`MODELS`.

    Attributes:
        name: Its ``--model`` value (and the stem of a closed-form model's parameter file).
        title: How messages name it (default: ``name``).
        build: A deep model's builder, ``"module:function"``: ``function(config, channels)``
            (a :class:`~sciml.weather.postprocess.config.PostprocessConfig` and the number
            of channels per member) returns the untrained network.
        fit: A closed-form model's fit, ``"module:function"``: ``function(train, config)``
            returns its parameters (an ``xarray.Dataset``) fitted on every date of
            ``train``.
        forecast: A closed-form model's forecast, ``"module:function"``:
            ``function(params, config, test, *, source)`` returns ``{variable: (mu, sigma)}``
            on ``test``.
        choice: The members a deep model sees per training sample when the configuration
            leaves it unset: ``"first"`` or ``"random"``.

    Raises:
        ValueError: Neither a builder nor a fit and a forecast, or both.
    """

    name: str
    title: str = ""
    build: str = ""
    fit: str = ""
    forecast: str = ""
    choice: str = "first"

    def __post_init__(self) -> None:
        """Check that the entry is either deep or closed-form (see the class)."""
        closed = bool(self.fit or self.forecast)
        if self.deep == closed or (closed and not (self.fit and self.forecast)):
            raise ValueError(
                f"post-processing model {self.name!r}: give build (a deep model) or fit and "
                f"forecast (a closed-form one), got build={self.build!r}, fit={self.fit!r}, "
                f"forecast={self.forecast!r}"
            )
        if self.choice not in ("first", "random"):
            raise ValueError(f"{self.name!r}: choice must be 'first' or 'random'")

    @property
    def called(self) -> str:
        """How messages name the model: its title, else its name."""
        return self.title or self.name

    @property
    def deep(self) -> bool:
        """Whether the loop trains it (else it is a closed-form fit on every date)."""
        return bool(self.build)

    @property
    def params(self) -> str:
        """A closed-form model's parameter file in its run folder (``emos.nc`` for EMOS)."""
        return f"{self.name}.nc"

    def function(self, role: Literal["build", "fit", "forecast"]) -> Callable[..., Any]:
        """The entry's ``build``, ``fit`` or ``forecast`` function, imported.

        Raises:
            ValueError: The entry has no such function (a deep model has no fit).
        """
        reference = getattr(self, role)
        if not reference:
            kind = "a deep" if self.deep else "a closed-form"
            raise ValueError(f"{self.name!r} is {kind} model: it has no {role} function")
        module, _, name = reference.partition(":")
        found: Callable[..., Any] = getattr(importlib.import_module(module), name)
        return found


_HERE = "sciml.weather.postprocess"

#: Every post-processing model, by name: ``sciml weather train --model``'s choices.
MODELS: dict[str, PostprocessModel] = {
    entry.name: entry
    for entry in (
        PostprocessModel(
            "emos", title="EMOS", fit=f"{_HERE}.emos:fit_run", forecast=f"{_HERE}.emos:forecast"
        ),
        PostprocessModel("mlp", build=f"{_HERE}.models:build_mlp"),
        PostprocessModel("unet", build=f"{_HERE}.models:build_unet"),
        PostprocessModel("mixed", build=f"{_HERE}.mixed:build_mixed"),
        PostprocessModel("pooled", build=f"{_HERE}.pooled:build_pooled", choice="random"),
    )
}


def model_entry(name: str) -> PostprocessModel:
    """The entry of the model ``name``.

    Raises:
        ValueError: No such model (the known ones named).
    """
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(
            f"no post-processing model {name!r}; the models are {', '.join(MODELS)}"
        ) from None


@contextmanager
def registered(entry: PostprocessModel) -> Iterator[PostprocessModel]:
    """``entry`` in :data:`MODELS` for the block, removed after.

    Raises:
        ValueError: A model of that name is already registered.
    """
    if entry.name in MODELS:
        raise ValueError(f"a post-processing model {entry.name!r} is already registered")
    MODELS[entry.name] = entry
    try:
        yield entry
    finally:
        del MODELS[entry.name]
