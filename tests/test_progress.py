"""sciml.progress: where bars are drawn, status lines, milestones."""

import logging
import re
import sys
import threading

import pytest

from sciml.progress import Milestones, bar_visible, duration, phase, status_lines

logger = logging.getLogger("sciml.test_progress")


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_a_bar_is_drawn_on_a_terminal_or_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", open("/dev/null", "w"))  # noqa: SIM115 (closed below)
    try:
        assert not bar_visible(True) and bar_visible("always") and not bar_visible(False)
        monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
        assert bar_visible(True)
    finally:
        sys.stderr.close()
    for bad in ("yes", 1, None):
        with pytest.raises(ValueError, match="progress must be True, False or 'always'"):
            bar_visible(bad)  # type: ignore[arg-type]


def test_status_lines_show_sciml_lines_on_stderr_only_inside_the_block(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger("sciml")
    before = (root.level, root.propagate, list(root.handlers))
    logger.info("before")
    with status_lines():
        logger.info("inside %d", 1)
        logger.debug("not at debug")
    logger.info("after")
    assert capsys.readouterr().err == "inside 1\n"
    assert (root.level, root.propagate, list(root.handlers)) == before


def test_a_phase_says_when_it_starts_and_how_long_it_took(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sciml")
    with phase(logger, "reading"):
        pass
    first, second = _messages(caplog)
    assert first == "reading ..." and re.fullmatch(r"reading: done in [0-9.]+ s", second)


def test_durations_read_as_people_write_them() -> None:
    assert [duration(s) for s in (4.24, 59.94, 185, 3599.6, 7260)] == [
        "4.2 s",
        "59.9 s",
        "3 min 05 s",
        "1 h 00 min",
        "2 h 01 min",
    ]


def test_milestones_log_each_tenth_once_from_any_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sciml")
    counter = Milestones(logger, "work", 1000, unit="items", enabled=True)
    threads = [
        threading.Thread(target=lambda: [counter.advance(1) for _ in range(250)]) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = _messages(caplog)
    assert [line.split(" (")[0] for line in lines] == [f"work: {p}%" for p in range(10, 101, 10)]
    assert lines[-1].startswith("work: 100% (1000/1000 items) after ")
    caplog.clear()
    jump = Milestones(logger, "jump", 20, unit="items", enabled=True)
    jump.advance(15)  # past 7 tenths at once: one line
    jump.advance(0)
    assert [line.split(" after")[0] for line in _messages(caplog)] == ["jump: 75% (15/20 items)"]
    caplog.clear()
    Milestones(logger, "quiet", 2, unit="items", enabled=False).advance(2)
    assert _messages(caplog) == []
    Milestones(logger, "nothing to do", 0, unit="items", enabled=True).advance(0)
    assert _messages(caplog) == []
    with pytest.raises(ValueError, match="Milestones.total must be >= 0, got -1"):
        Milestones(logger, "less than nothing", -1, unit="items", enabled=True)
