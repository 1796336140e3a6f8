"""Split blocks that know they are split.

The tensor type (:mod:`.tensor`), its op tables (:mod:`.dispatch`, the op names in
:mod:`.op_names`), the ops computed globally (:mod:`.ops`, :mod:`.along`,
:mod:`.layout`, :mod:`.pad`, :mod:`.resample`), where replicated values meet
split ones (:mod:`.crossings`), re-partitioning and the hooks that wrap and
unwrap blocks.
"""

# the op tables register the handler SplitTensor runs every torch op through
from sciml.spatial_parallel.split import dispatch as _dispatch  # noqa: E402, F401
