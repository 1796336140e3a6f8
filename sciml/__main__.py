"""``python -m sciml`` (and so ``torchrun -m sciml``): the ``sciml`` command."""

import sys

from sciml.cli import main

sys.exit(main())
