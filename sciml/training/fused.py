"""Train K copies of one small model as one (horizontal fusion, as HFTA does).

The copies share an architecture and differ in their initial weights (each built after
its own seed) and in their optimiser's settings. Each keeps its own parameters; a fused
call stacks them and runs every copy's forward (or whole loss) as one batched
computation, ``torch.func.vmap`` over ``torch.func.functional_call``: K small
convolutions become one grouped convolution, K matrix products one batched product.
Gradients flow back to each copy's own parameters, so an optimiser with one parameter
group per copy (:meth:`FusedModels.param_groups`) updates each as its separate run
would, with its own learning rate and Adam state::

    copies = []
    for seed in (0, 1, 2):
        seed_everything(seed)
        copies.append(build_model())
    fused = FusedModels(copies)
    optimizer = torch.optim.Adam(fused.param_groups(lr=[1e-3, 1e-3, 3e-4]))
    losses = fused.losses(loss_fn, batches)  # (K,): each copy's loss on its own batch
    losses.sum().backward()                  # each copy's gradient, as on its own
    optimizer.step()

Inputs carry a leading copy dimension (copy ``k`` reads ``batch[k]``). Buffers that a
forward updates in place (batch-norm running statistics) are updated per copy. Random
ops (dropout) are refused: a batched draw cannot reproduce the copies' separate draws.

On the CPU the copies run one after another in the same call instead (``strategy="auto"``,
:data:`STRATEGIES`): a CPU step of these models is compute-bound, so batching saves
nothing, and a batched convolution becomes a grouped one, which oneDNN runs about 2x
slower (``benchmarks/weather_fused_sweeps.py``). A fused run still shares its process,
data and preparation, with results equal to the separate runs'.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

if TYPE_CHECKING:
    from sciml.training.trainer import RunTrainer

__all__ = ["STRATEGIES", "FusedModels", "fused_backward"]

#: How the copies are called: ``"vmap"`` (one batched computation), ``"loop"`` (one after
#: another) or ``"auto"`` (``vmap`` when the copies are on a GPU, else ``loop``).
STRATEGIES = ("auto", "vmap", "loop")
_RANDOM = (
    "a fused call met a random op (e.g. dropout in training mode): one batched draw cannot "
    "reproduce each copy's own draws; train such copies separately"
)


class _Applied(nn.Module):
    """``fn(model, *args, **kwargs)`` as a module's forward.

    So ``functional_call`` swaps the model's parameters for the whole of ``fn`` (its loss,
    its regularisation), not only for the model's forward.
    """

    def __init__(self, model: nn.Module, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.model, self.fn = model, fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(self.model, *args, **kwargs)


def _signature(model: nn.Module) -> list[tuple[str, str, tuple[int, ...], torch.dtype, bool]]:
    """What two copies must share: type, parameter and buffer names, shapes, dtypes."""
    tensors: list[tuple[str, str, Tensor]] = [("param", n, t) for n, t in model.named_parameters()]
    tensors += [("buffer", n, t) for n, t in model.named_buffers()]
    return [
        (kind, name, tuple(t.shape), t.dtype, bool(t.requires_grad)) for kind, name, t in tensors
    ]


class FusedModels(nn.Module):
    """K copies of one architecture, called as one batched model.

    Args:
        copies: The models, each built (and initialised) on its own; at least one, all of
            one type with the same parameters and buffers (names, shapes, dtypes).
        strategy: One of :data:`STRATEGIES` (the module docstring).

    Raises:
        ValueError: No copies, copies that differ in architecture (named), or an unknown
            strategy.
    """

    def __init__(self, copies: Sequence[nn.Module], *, strategy: str = "auto") -> None:
        """Keep the copies (arguments: see the class)."""
        super().__init__()
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        self.strategy = strategy
        if not copies:
            raise ValueError("FusedModels needs at least one copy")
        first = copies[0]
        for k, model in enumerate(copies[1:], start=1):
            if type(model) is not type(first) or _signature(model) != _signature(first):
                raise ValueError(
                    f"copy {k} ({type(model).__name__}) differs from copy 0 "
                    f"({type(first).__name__}) in its parameters or buffers: fused copies must "
                    "share one architecture"
                )
            if any(model is other for other in copies[:k]):
                raise ValueError(f"copy {k} is the same module as an earlier copy")
        self.copies = nn.ModuleList(copies)

    def __len__(self) -> int:
        """The number of copies, K."""
        return len(self.copies)

    def param_groups(self, **options: float | Sequence[float]) -> list[dict[str, Any]]:
        """One optimiser parameter group per copy; an option given as K values is per copy.

        ``param_groups(lr=[1e-3, 3e-4], weight_decay=0.0)`` gives copy 0 the rate 1e-3 and
        copy 1 the rate 3e-4; each group is the ``params`` of one copy.

        Raises:
            ValueError: An option with other than K values.
        """
        groups: list[dict[str, Any]] = [{"params": list(m.parameters())} for m in self.copies]
        for name, value in options.items():
            values = list(value) if isinstance(value, Sequence) else [value] * len(self)
            if len(values) != len(self):
                raise ValueError(
                    f"{name} must be one value or {len(self)} (one per copy), got {len(values)}"
                )
            for group, v in zip(groups, values, strict=True):
                group[name] = v
        return groups

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Every copy's forward on its own inputs (leading dim K); outputs stacked along dim 0."""
        return self.apply_each(lambda model, *a, **kw: model(*a, **kw), *args, **kwargs)

    def losses(self, loss_fn: Callable[[nn.Module, Any], Tensor], batch: Any) -> Tensor:
        """``loss_fn(copy_k, batch[k])`` for every copy at once: the K losses, ``(K,)``.

        ``loss_fn`` is the separate runs' loss (e.g. ``fit``'s), returning a scalar tensor.
        """
        losses = self.apply_each(loss_fn, batch)
        if not isinstance(losses, Tensor) or tuple(losses.shape) != (len(self),):
            raise TypeError(
                "loss_fn must return a scalar tensor for each copy, got "
                f"{type(losses).__name__} {getattr(losses, 'shape', '')}"
            )
        return losses

    def _on_gpu(self) -> bool:
        return any(p.device.type == "cuda" for p in self.copies[0].parameters())

    def batched(self) -> bool:
        """Whether a call runs the copies as one batched computation (``vmap``)."""
        return self.strategy == "vmap" if self.strategy != "auto" else self._on_gpu()

    def apply_each(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(copy_k, *args[k], **kwargs[k])`` for every copy, in one call.

        Every tensor in ``args`` and ``kwargs`` has a leading dim of K; tensors in the
        result (a tensor, or tuples, lists and dicts of them) are stacked along a new
        leading dim.

        Raises:
            ValueError: An input whose leading dim is not K, or a random op in ``fn``.
        """
        _check_leading_dim((args, kwargs), len(self))
        if not self.batched():
            return self._one_after_another(fn, args, kwargs)
        applied = _Applied(self.copies[0], fn)
        # each copy's tensors, stacked, named as in ``applied`` (which holds copy 0 as model);
        # the copies share names and order (checked when they were given)
        params = {
            f"model.{name}": torch.stack(tensors)
            for (name, _), *tensors in zip(
                self.copies[0].named_parameters(),
                *([t for _, t in m.named_parameters()] for m in self.copies),
                strict=True,
            )
        }
        buffers = {
            f"model.{name}": torch.stack(tensors)
            for (name, _), *tensors in zip(
                self.copies[0].named_buffers(),
                *([t for _, t in m.named_buffers()] for m in self.copies),
                strict=True,
            )
        }

        def one(state: dict[str, Tensor], a: tuple[Any, ...], kw: dict[str, Any]) -> Any:
            return functional_call(applied, state, a, kw, tie_weights=False)

        try:
            out = vmap(one, randomness="error")({**params, **buffers}, args, kwargs)
        except RuntimeError as err:
            if "randomness" not in str(err):
                raise
            raise ValueError(_RANDOM) from err
        with torch.no_grad():  # buffers updated in place in the call (running statistics)
            for k, model in enumerate(self.copies):
                for (_, own), stacked in zip(model.named_buffers(), buffers.values(), strict=True):
                    own.copy_(stacked[k])
        return out

    def _one_after_another(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """:meth:`apply_each` by calling each copy in turn (a random op is refused as there)."""
        on_gpu = self._on_gpu()
        before = _generator_states(on_gpu)
        outs = [
            fn(model, *_pick(args, k), **_pick(kwargs, k)) for k, model in enumerate(self.copies)
        ]
        after = _generator_states(on_gpu)
        if any(not torch.equal(a, b) for a, b in zip(after, before, strict=True)):
            raise ValueError(_RANDOM)
        return _stacked(outs)


def _generator_states(on_gpu: bool) -> list[Tensor]:
    """The CPU's random generator state, and the GPUs' when the copies are on one."""
    return [torch.get_rng_state(), *(torch.cuda.get_rng_state_all() if on_gpu else [])]


def _pick(inputs: Any, k: int) -> Any:
    """Copy ``k``'s slice of every tensor in ``inputs`` (tensors in dicts, lists, tuples)."""
    if isinstance(inputs, Tensor):
        return inputs[k]
    if isinstance(inputs, dict):
        return {key: _pick(value, k) for key, value in inputs.items()}
    if isinstance(inputs, list | tuple):
        return type(inputs)(_pick(value, k) for value in inputs)
    return inputs


def _stacked(outs: Sequence[Any], what: str = "a fused call's outputs") -> Any:
    """The copies' outputs (or the runs' batches) with every tensor stacked along a new dim 0."""
    first = outs[0]
    if isinstance(first, Tensor):
        return torch.stack(list(outs))
    if isinstance(first, dict):
        return {key: _stacked([out[key] for out in outs], what) for key in first}
    if isinstance(first, list | tuple):
        return type(first)(_stacked(list(parts), what) for parts in zip(*outs, strict=True))
    raise TypeError(f"{what} must hold tensors (in dicts, lists, tuples), got {first!r}")


def fused_backward(
    models: FusedModels,
    loss_fn: Callable[[nn.Module, Any], Any],
    trainers: Sequence[RunTrainer],
    steps: Sequence[tuple[list[Any], list[int]]],
) -> list[dict[str, float]]:
    """Back-propagate every run's batch at once: :func:`~sciml.training.fit_fused`'s step.

    Args:
        models: The runs' models, fused (one copy per run, in the order of ``trainers``).
        loss_fn: ``loss_fn(model, batch)``, as for :func:`~sciml.training.fit`.
        trainers: The runs.
        steps: Each run's batch parts and their sizes (the same sizes for every run).

    Returns:
        Each run's values, as its own :class:`~sciml.training.step.StepRunner` gives them.
    """
    sizes = steps[0][1]
    total = sum(sizes)
    values: list[dict[str, float]] = [{} for _ in trainers]
    bf16 = trainers[0].s.config.precision == "bf16"
    device = trainers[0].s.device
    for index, size in enumerate(sizes):
        batch = _stacked([parts[index] for parts, _ in steps], "the fused runs' batches")
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            output = models.apply_each(loss_fn, batch)
        named = {"loss": output} if isinstance(output, Tensor) else dict(output)
        if "loss" not in named or any(
            not isinstance(v, Tensor) or tuple(v.shape) != (len(trainers),) for v in named.values()
        ):
            raise TypeError(
                "loss_fn must return a scalar tensor, or a dict with a 'loss' entry of "
                "scalar tensors, for each run"
            )
        listed = {name: tensor.detach().tolist() for name, tensor in named.items()}  # one read
        for trainer, loss in zip(trainers, listed["loss"], strict=True):
            if not math.isfinite(loss):
                raise FloatingPointError(
                    f"loss is {loss} {trainer.where()}; lower the learning rate or check the inputs"
                )
        losses = named["loss"]
        (losses.sum() * (size / total) if len(sizes) > 1 else losses.sum()).backward()
        for name, per_run in listed.items():
            for k, value in enumerate(per_run):
                values[k][name] = values[k].get(name, 0.0) + value * size / total
    return values


def _check_leading_dim(inputs: Any, k: int) -> None:
    """Raise ValueError naming an input tensor whose leading dim is not ``k``."""
    pending = [inputs]
    while pending:
        item = pending.pop()
        if isinstance(item, Tensor):
            if item.dim() == 0 or item.shape[0] != k:
                raise ValueError(
                    f"each input needs a leading dim of {k} (one slice per copy), got a tensor "
                    f"of shape {tuple(item.shape)}"
                )
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
