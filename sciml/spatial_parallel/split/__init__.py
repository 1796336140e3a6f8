"""Split blocks that know they are split.

The tensor type, its op dispatch, block layouts, re-partitioning and the hooks
that wrap and unwrap blocks.
"""

# the op tables register the handler SplitTensor runs every torch op through
from sciml.spatial_parallel.split import dispatch as _dispatch  # noqa: E402, F401
