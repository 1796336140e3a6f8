"""The ``sciml`` command line: help on every subcommand, info, the demo."""

import argparse
import importlib
import inspect
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from sciml.cli import EXIT_FAILURE, EXIT_USAGE, WORKFLOW_CLIS, WORKFLOW_COMMANDS, build_parser, main
from sciml.cli_args import (
    finite_float,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from sciml.training import EXIT_REQUEUE


def _subcommand_paths(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from _subcommand_paths(sub, (*prefix, name))


@pytest.mark.parametrize("path", [(), *_subcommand_paths(build_parser())], ids=" ".join)
def test_every_subcommand_has_help(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*path, "--help"])
    assert exit_info.value.code == 0
    assert "usage: sciml" in capsys.readouterr().out


@pytest.mark.parametrize("module", WORKFLOW_CLIS)
def test_every_workflow_register_has_the_one_register_type(module: str) -> None:
    signature = inspect.signature(importlib.import_module(module).register)
    assert [p.annotation for p in signature.parameters.values()] == ["Subparsers"]
    assert signature.return_annotation == "None"


def test_info_lists_versions_and_backends(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "gloo=yes" in out


def test_python_m_sciml_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sciml", "--version"], check=True, capture_output=True, text=True
    ).stdout
    assert out.startswith("sciml ")


def test_bare_sciml_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: sciml") and "weather" in out and "cosmoflow" in out


def test_help_imports_no_workflow() -> None:
    code = (
        "import sys\n"
        "from sciml.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'xarray', 'pandas', 'matplotlib') or m.endswith('.cli')))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.split("\n")[-2] == "['sciml.cli']"


#: Libraries that take seconds to import; no ``--help`` may need them.
HEAVY_LIBRARIES = ("torch", "xarray", "pandas", "dask", "matplotlib", "geopandas", "rasterio")

# Builds the full parser, prints every (sub)command's help, then prints the heavy
# libraries imported and the number of helps printed.
_EVERY_HELP = """
import argparse, contextlib, io, json, sys
from sciml.cli import build_parser, main

def paths(parser, prefix=()):
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from paths(sub, (*prefix, name))

shown = 0
for path in paths(build_parser()):
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
        main([*path, "--help"])
    shown += out.getvalue().startswith("usage: sciml")
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[1])))
print(json.dumps({"heavy": heavy, "shown": shown}))
"""


def test_every_help_imports_no_heavy_library() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", _EVERY_HELP, json.dumps(HEAVY_LIBRARIES)],
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0, probe.stderr
    result = json.loads(probe.stdout)
    assert result["shown"] == 1 + len(list(_subcommand_paths(build_parser())))
    assert result["heavy"] == []


def test_workflow_placeholders_say_what_the_workflows_register() -> None:
    def helps(parser: argparse.ArgumentParser) -> dict[str, str | None]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return {choice.dest: choice.help for choice in sub._choices_actions}

    registered = helps(build_parser())
    assert helps(build_parser([])) == registered
    with pytest.raises(ValueError, match=r"unknown workflow command\(s\) \['nope'\]"):
        build_parser(["nope"])
    assert {name: about for name, (_, about) in WORKFLOW_COMMANDS.items()} == {
        name: registered[name] for name in WORKFLOW_COMMANDS
    }


def test_unknown_option_shows_the_subcommands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["weather", "score", "--variable", "t", "--bogus", "f.nc"])
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("usage: sciml weather score ")
    assert err.splitlines()[-1] == "sciml weather score: error: unrecognized arguments: --bogus"


def test_only_rank_0_prints_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    taken = tmp_path / "a-file"  # the demo's output folder is a file: a failure, not usage
    taken.write_text("")
    assert main(["demo", "--only", "spine", "--out", str(taken)]) == EXIT_FAILURE
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--bogus"])
    assert exit_info.value.code == EXIT_USAGE
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    assert main(["demo", "--only", "spine", "--out", str(taken)]) == EXIT_FAILURE
    assert capsys.readouterr().err.startswith("sciml: error: NotADirectoryError: ")


def _train_steps(run_dir: Path) -> int:
    metrics = run_dir / "metrics.csv"
    return metrics.read_text().count(",train_step,loss,") if metrics.exists() else 0


@pytest.mark.system
def test_demo_checkpoints_and_exits_3_on_sigusr1_then_resumes(tmp_path: Path) -> None:
    """The spine section stopped by a signal, then run again: the whole section's report."""
    cmd = [sys.executable, "-m", "sciml", "demo", "--quick", "--only", "spine"]
    cmd += ["--out", str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    folder = tmp_path / "only-spine"
    run_dir = folder / "spine-quick"
    deadline = time.monotonic() + 120
    while _train_steps(run_dir) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGUSR1)  # as Slurm does before the time limit
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_REQUEUE, err
    assert "interrupted by a signal" in err and "IndexError" not in err
    checkpoint = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    stopped_at = checkpoint["state"]["global_step"]
    assert 1 <= stopped_at < 8  # 2 epochs of 4 steps
    report = (folder / "report.md").read_text()
    assert "**Interrupted**" in report and "## Spine" not in report
    assert not (folder / "spine_training.png").exists()  # the section's figure comes at its end

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert str(folder / "report.md") in again.stdout
    report = (folder / "report.md").read_text()
    assert "## Spine" in report and "Interrupted" not in report
    assert "optimiser steps: 8, status: completed" in report and "validation RMSE" in report
    assert (folder / "spine_training.png").stat().st_size > 10_000
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    steps = [int(row.split(",")[1]) for row in rows if ",train_step,loss," in row]
    assert steps == list(range(1, 9))  # resumed: every step once


def test_demo_stops_after_a_section_that_got_a_signal_outside_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import types

    from sciml import demos

    def first(outdir: Path, *, quick: bool) -> str:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while no training loop runs
        return "## First"

    def second(outdir: Path, *, quick: bool) -> str:
        raise AssertionError("a section after the signal ran")

    for name, fn in (("first", first), ("second", second)):
        monkeypatch.setitem(sys.modules, f"fake_{name}", types.SimpleNamespace(demo=fn))
    monkeypatch.setattr(demos, "SECTIONS", {"first": "fake_first", "second": "fake_second"})
    with pytest.raises(demos.DemoInterrupted, match="'first' interrupted by a signal") as stop:
        demos.run_demo(tmp_path)
    text = stop.value.report.read_text()
    assert "## First" in text and "**Interrupted**" in text


def test_demo_rejects_unknown_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--only", "nope", "--out", str(tmp_path)])
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("usage: sciml demo")
    assert err[-1] == (
        "sciml demo: error: argument --only: invalid choice: 'nope' (choose from 'spine', "
        "'spatial', 'weather', 'geo', 'volumes')"
    )
    assert list(tmp_path.iterdir()) == []


# An unknown section, as a user types it: the exit code, whether the demo package or a heavy
# library was imported, and the CPU seconds the command took.
_UNKNOWN_SECTION = """
import json, resource, sys
from sciml.cli import main
try:
    main(["demo", "--only", "nosuch", "--out", sys.argv[1]])
except SystemExit as stop:
    code = stop.code
usage = resource.getrusage(resource.RUSAGE_SELF)
loaded = sorted(m for m in sys.modules if m in ("sciml.demos", "torch", "xarray", "matplotlib"))
print(json.dumps({"code": code, "loaded": loaded, "cpu": usage.ru_utime + usage.ru_stime}))
"""


def test_demo_unknown_section_exits_2_before_any_work(tmp_path: Path) -> None:
    """``sciml demo --only nosuch``: exit 2 from the parser, nothing imported or written."""
    start = time.perf_counter()
    probe = subprocess.run(
        [sys.executable, "-c", _UNKNOWN_SECTION, str(tmp_path / "demo")],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    assert probe.returncode == 0, probe.stderr
    result = json.loads(probe.stdout.splitlines()[-1])
    assert result["code"] == EXIT_USAGE
    assert result["loaded"] == []
    assert "invalid choice: 'nosuch'" in probe.stderr
    assert not (tmp_path / "demo").exists()
    # CPU time, not wall time: on a loaded machine the interpreter's start alone may wait
    assert result["cpu"] < 2.0, (result, wall)


def test_demo_sections_are_the_parsers_choices() -> None:
    from sciml import demos
    from sciml.cli import DEMO_SECTIONS

    assert tuple(demos.SECTIONS) == DEMO_SECTIONS


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("")
    with pytest.raises(NotADirectoryError):
        main(["--debug", "demo", "--only", "spine", "--out", str(taken)])


def _options(path: tuple[str, ...]) -> list[argparse.Action]:
    parser = build_parser()
    for name in path:
        parser = next(
            a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
        ).choices[name]
    return [
        a
        for a in parser._actions
        if not isinstance(
            a, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction
        )
    ]


@pytest.mark.parametrize("path", [(), *_subcommand_paths(build_parser())], ids=" ".join)
def test_every_option_has_help_and_shows_its_default(
    path: tuple[str, ...], capsys: pytest.CaptureFixture
) -> None:
    options = _options(path)
    assert [a.dest for a in options if not a.help] == []
    with pytest.raises(SystemExit):
        main([*path, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for action in options:
        unset = action.required or action.default in (None, False, argparse.SUPPRESS)
        if action.option_strings and not unset:
            assert f"(default: {action.default})" in text, (path, action.dest)
    assert "(default: None)" not in text and "(default: False)" not in text


@pytest.mark.parametrize(
    "kind, text",
    [
        (positive_int, "0"),
        (positive_int, "1.5"),
        (non_negative_int, "-1"),
        (positive_float, "nan"),
        (positive_float, "0"),
        (non_negative_float, "-0.1"),
        (finite_float, "inf"),
    ],
)
def test_numeric_types_reject_bad_values(kind: Callable[[str], float], text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected"):
        kind(text)


def test_numeric_types_accept_good_values() -> None:
    assert positive_int("3") == 3 and non_negative_int("0") == 0
    assert positive_float("1e-3") == 1e-3 and non_negative_float("0") == 0.0
    assert finite_float("-2.5") == -2.5


def test_demo_section_failing_after_a_signal_counts_as_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import types

    from sciml import demos

    def workers_killed(outdir: Path, *, quick: bool) -> str:
        os.kill(os.getpid(), signal.SIGTERM)  # the job's other processes died of it too
        raise RuntimeError("rank 1 of 2 exited with code -15 without a result")

    monkeypatch.setitem(sys.modules, "fake_spawning", types.SimpleNamespace(demo=workers_killed))
    monkeypatch.setattr(demos, "SECTIONS", {"spawning": "fake_spawning"})
    assert main(["demo", "--out", str(tmp_path)]) == EXIT_REQUEUE
    assert "**Interrupted**" in (tmp_path / "report.md").read_text()


def test_demo_only_writes_its_own_report_and_keeps_the_full_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import types

    from sciml import demos

    def section(title: str) -> Callable[..., str]:
        def demo(outdir: Path, *, quick: bool) -> str:
            (outdir / f"{title}.png").write_text(title)
            return f"## {title}"

        return demo

    for name in ("first", "second"):
        module = types.SimpleNamespace(demo=section(name))
        monkeypatch.setitem(sys.modules, f"fake_{name}", module)
    monkeypatch.setattr(demos, "SECTIONS", {"first": "fake_first", "second": "fake_second"})
    full = demos.run_demo(tmp_path)
    assert full == tmp_path / "report.md"
    text = full.read_text()
    assert "## first" in text and "## second" in text
    page = (tmp_path / "report.html").read_text()  # the same report, as HTML beside it
    assert "<h2>first</h2>" in page and "<h2>second</h2>" in page

    partial = demos.run_demo(tmp_path, only=["second", "second"])
    assert partial == tmp_path / "only-second" / "report.md"
    assert "## second" in partial.read_text() and "## first" not in partial.read_text()
    assert (tmp_path / "only-second" / "second.png").exists()
    assert full.read_text() == text  # the full report and its figures stay as they were
    assert demos.run_demo(tmp_path, only=["second", "first"]) == full
