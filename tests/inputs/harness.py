"""What every input test of the harness asserts, and its hypothesis settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from sciml.cli import main
from tests.file_digests import digests

#: ``make test``: a few examples of each kind, the same every run.
QUICK = settings(
    max_examples=1,
    derandomize=True,
    deadline=None,
    database=None,
    # the first failing example is reported as found: shrinking reruns commands for minutes
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,  # capsys: read after every command
    ],
)
#: ``make system-test`` (``slow``): more of each kind.
SLOW = settings(QUICK, max_examples=12, phases=list(Phase))


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], named: Path, *paths: Path) -> str:
    """Run a command that must fail naming ``named``, leaving ``paths`` byte for byte."""
    before = digests(*paths)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 1, f"exit {code}, not a refusal: {err[-2000:]}"
    assert str(named) in err, f"the error does not name {named}: {err[-2000:]}"
    after = digests(*paths)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"a refused command changed its inputs or outputs: {changed[:6]}"
    return err


def ran(argv: list[str], *inputs: Path) -> int:
    """Run a command; its inputs stay byte for byte whatever it answers."""
    before = digests(*inputs)
    code = main(argv)
    assert digests(*inputs) == before, "a command changed its inputs"
    return code
