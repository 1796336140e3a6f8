"""The process grid: data-parallel replicas times a 3D grid of spatial blocks.

Naming: an *axis* is a direction of the process grid (``data``, ``depth``,
``height``, ``width``: :data:`MESH_AXES`); a *dim* is a dimension of a tensor
``(N, C, D, H, W)``. The spatial axes split the tensor dims ``D``, ``H``, ``W``
of the same name; the ``data`` axis splits the batch dim ``N``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from sciml.distributed.collectives import all_reduce_cpu
from sciml.spatial_parallel.partition import DIM_NAMES, MESH_AXES, block_bounds


class SpatialMesh:
    """A ``(data, depth, height, width)`` grid of ranks over ``torch.distributed``.

    Ranks are laid out row-major (``width`` fastest). Each sample is split in
    space over the ``depth x height x width`` ranks of its data-parallel
    replica; the batch is split over the ``data`` replicas.

    Args:
        data: Data-parallel replicas.
        depth: Ranks splitting the depth (``D``) axis.
        height: Ranks splitting the height (``H``) axis.
        width: Ranks splitting the width (``W``) axis.
        device_type: Device type of the underlying :class:`DeviceMesh`
            (default: ``"cuda"`` under NCCL, else ``"cpu"``).

    Raises:
        RuntimeError: If ``torch.distributed`` is not initialised.
        ValueError: If a size is not a positive integer or the product is not
            the world size.
    """

    def __init__(
        self,
        *,
        data: int = 1,
        depth: int = 1,
        height: int = 1,
        width: int = 1,
        device_type: str | None = None,
    ) -> None:
        """Check the sizes and build the device mesh (arguments: see the class)."""
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "SpatialMesh needs an initialised torch.distributed process group "
                "(use sciml.distributed.init_distributed() or spawn())"
            )
        shape = (data, depth, height, width)
        for name, value in zip(MESH_AXES, shape, strict=True):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"SpatialMesh {name}= must be a positive integer, got {value!r}")
        world = dist.get_world_size()
        if math.prod(shape) != world:
            raise ValueError(
                f"SpatialMesh(data={data}, depth={depth}, height={height}, width={width}) has "
                f"{math.prod(shape)} ranks but the world size is {world}"
            )
        if device_type is None:
            device_type = "cuda" if "nccl" in dist.get_backend_config() else "cpu"
        self.shape: tuple[int, int, int, int] = shape
        self.rank = dist.get_rank()
        self.coords: tuple[int, int, int, int] = tuple(  # type: ignore[assignment]
            int(c) for c in torch.unravel_index(torch.tensor(self.rank), shape)
        )
        self.device_mesh: DeviceMesh = init_device_mesh(
            device_type, shape, mesh_dim_names=MESH_AXES
        )
        self.data_group = self.device_mesh.get_group("data")
        self.dim_groups = tuple(self.device_mesh.get_group(name) for name in DIM_NAMES)
        self.spatial_group = self._new_groups(
            [[self.rank_of(d, *s) for s in self._spatial_coords()] for d in range(data)]
        )
        # Gradient buckets reduce on their own group so that they never interleave
        # with the forward/backward collectives of the layers.
        self.grad_group = dist.new_group(list(range(world)))
        #: Point-to-point halo messages (global ranks) travel on their own group too.
        self.halo_group = dist.new_group(list(range(world)))
        if "nccl" in dist.get_backend_config(self.halo_group):
            # NCCL needs every rank in a group's first call; batched halo messages
            # involve only neighbours, so start the communicator here
            warm = torch.zeros(1, device=torch.device("cuda", torch.cuda.current_device()))
            dist.all_reduce(warm, group=self.halo_group)

    def _spatial_coords(self) -> list[tuple[int, int, int]]:
        return [
            (d, h, w)
            for d in range(self.grid[0])
            for h in range(self.grid[1])
            for w in range(self.grid[2])
        ]

    def _new_groups(self, rank_lists: Sequence[Sequence[int]]) -> dist.ProcessGroup:
        mine = None
        for ranks in rank_lists:  # every rank creates every group, in the same order
            group = dist.new_group(list(ranks))
            if self.rank in ranks:
                mine = group
        assert mine is not None
        return mine

    @property
    def data(self) -> int:
        """Data-parallel replicas."""
        return self.shape[0]

    @property
    def grid(self) -> tuple[int, int, int]:
        """Ranks along ``(depth, height, width)``."""
        return self.shape[1:]

    @property
    def spatial_size(self) -> int:
        """Ranks sharing one sample."""
        return math.prod(self.grid)

    @property
    def spatial_coords(self) -> tuple[int, int, int]:
        """This rank's ``(depth, height, width)`` block indices."""
        return self.coords[1:]

    @property
    def data_index(self) -> int:
        """This rank's data-parallel replica."""
        return self.coords[0]

    def rank_of(self, data: int, depth: int, height: int, width: int) -> int:
        """Global rank at grid coordinates ``(data, depth, height, width)``."""
        index = 0
        for size, coord in zip(self.shape, (data, depth, height, width), strict=True):
            index = index * size + coord
        return index

    def global_shape(self, local: Sequence[int]) -> tuple[int, ...]:
        """Global ``(N, C, D, H, W)`` of a split tensor whose local block is ``local``.

        One small all-reduce over every rank (skipped on one rank): the fallback
        when the global shape is neither marked nor declared
        (:mod:`sciml.spatial_parallel.shapes`).
        """
        local = tuple(int(s) for s in local)
        if len(local) != 5:
            raise ValueError(f"expected a local (N, C, D, H, W) shape, got {local}")
        if dist.get_world_size() == 1:
            return local
        # tensor dim -> mesh axis that splits it (the channel dim is not split)
        splits = {0: 0, 2: 1, 3: 2, 4: 3}
        first = all(c == 0 for c in self.coords)
        mine = [
            size if (first if dim == 1 else self._on_axis(splits[dim])) else 0
            for dim, size in enumerate(local)
        ]
        total = all_reduce_cpu(torch.tensor(mine, dtype=torch.int64))
        return tuple(int(s) for s in total)

    def _on_axis(self, axis: int) -> bool:
        """Whether this rank is at coordinate 0 along every mesh axis but ``axis``."""
        return all(c == 0 for k, c in enumerate(self.coords) if k != axis)

    def global_spatial_shape(self, local: Sequence[int]) -> tuple[int, int, int]:
        """Global ``(D, H, W)`` of a split tensor whose local block is ``local``.

        A collective over the spatial group (skipped when nothing is split).
        """
        local = tuple(int(s) for s in local[-3:])
        if self.spatial_size == 1:
            return local  # type: ignore[return-value]
        mine = [
            size if all(c == 0 for j, c in enumerate(self.spatial_coords) if j != k) else 0
            for k, size in enumerate(local)
        ]
        sizes = all_reduce_cpu(torch.tensor(mine, dtype=torch.int64), group=self.spatial_group)
        return tuple(int(s) for s in sizes)  # type: ignore[return-value]

    def global_batch(self, local: int) -> int:
        """Global batch size from this replica's ``local`` one (a collective over ``data``)."""
        if self.data == 1:
            return local
        size = all_reduce_cpu(torch.tensor([local], dtype=torch.int64), group=self.data_group)
        return int(size)

    def block(self, shape: Sequence[int]) -> tuple[slice, ...]:
        """This rank's slices of a global ``(N, C, D, H, W)`` tensor of ``shape``."""
        if len(shape) != 5:
            raise ValueError(f"expected a global (N, C, D, H, W) shape, got {tuple(shape)}")
        batch = block_bounds(shape[0], self.data)[self.data_index]
        spatial = [
            block_bounds(size, parts)[coord]
            for size, parts, coord in zip(shape[2:], self.grid, self.spatial_coords, strict=True)
        ]
        return (slice(*batch), slice(None), *(slice(*b) for b in spatial))

    def __repr__(self) -> str:
        """The mesh shape and this rank's place in it."""
        data, depth, height, width = self.shape
        return (
            f"SpatialMesh(data={data}, depth={depth}, height={height}, width={width}; "
            f"rank {self.rank} at {self.coords})"
        )
