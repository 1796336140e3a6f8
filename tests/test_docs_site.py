"""The documentation site in a real browser: every page of ``make docs``'s build, served
over HTTP and opened by headless Chromium through Playwright.

Each page must load without a console error, a page error or a failed request; every
``<img>`` must be drawn (loaded, ``naturalWidth > 0``) and every formula typeset by the
site's own MathJax; the page must show as many figures as its source names (a notebook:
the images its cells output when the build ran it; a Markdown page: its ``![...](...)``
images); every link inside the site must lead to a file of the build, and a link's
``#anchor`` to an id on that page. Screenshots of three pages go to
``runs/docs-screens/``.

The site is built once, by the command ``make docs`` runs (Sphinx's incremental build:
a minute or two when nothing changed, most of it importing the package for the API pages;
from nothing, the notebooks and the quick demo run: about 15 minutes on 2 busy cores).
Needs Debian's Chromium (``/usr/bin/chromium``; ``.ci/run`` installs it on CI, where the
test must run) and the ``docs`` extra.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "docs" / "_build" / "html"
EXECUTED = ROOT / "docs" / "_build" / "jupyter_execute"
SCREENS = ROOT / "runs" / "docs-screens"
CHROMIUM = Path(os.environ.get("SCIML_CHROMIUM", "/usr/bin/chromium"))
#: The command of ``make docs`` (the Makefile prints its time around it).
BUILD = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "docs", str(SITE)]
#: Pages photographed: a notebook, an API page and a user-guide page.
SCREENSHOTS = {
    "notebook_03.png": "notebooks/03_weather_postprocessing.html",
    "api_weather_metrics.png": "api/sciml.weather.metrics.html",
    "guide_spatial_parallelism.png": "guide/spatial_parallelism.html",
}

pytestmark = [
    pytest.mark.system,
    pytest.mark.xdist_group("docs_site"),
    pytest.mark.timeout(3600),  # a build from nothing runs the five notebooks and the demo
]


@pytest.fixture(scope="module")
def site() -> Path:
    if not CHROMIUM.exists():
        reason = f"needs Chromium at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}: CI must run the browser test")
        pytest.skip(reason)
    pytest.importorskip("sphinx", reason="needs the docs extra (make docs installs it)")
    build = subprocess.run(BUILD, cwd=ROOT, capture_output=True, text=True, timeout=3300)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-6000:]
    return SITE


@pytest.fixture(scope="module")
def base_url(site: Path) -> Iterator[str]:
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=site))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(site: Path) -> Iterator[object]:
    playwright = pytest.importorskip("playwright.sync_api", reason="needs the docs extra")
    with playwright.sync_playwright() as driver:
        # the system's Chromium: Playwright downloads no browser here
        chromium = driver.chromium.launch(executable_path=str(CHROMIUM))
        yield chromium
        chromium.close()


def pages(site: Path) -> list[str]:
    """Every HTML page of the build, as paths relative to its root."""
    return sorted(
        path.relative_to(site).as_posix()
        for path in site.rglob("*.html")
        if not path.relative_to(site).parts[0].startswith("_")
    )


def expected_figures(site: Path, page: str) -> int:
    """How many figures the source of ``page`` names (0 for pages Sphinx makes)."""
    docname = page.removesuffix(".html")
    executed = EXECUTED / f"{docname}.ipynb"
    if docname.startswith("notebooks/"):
        notebook = json.loads(executed.read_text())
        return sum(
            any(kind.startswith("image/") for kind in output.get("data", {}))
            for cell in notebook["cells"]
            for output in cell.get("outputs", [])
            if output.get("output_type") in ("display_data", "execute_result")
        )
    sources = list((site / "_sources").glob(f"{docname}.*.txt"))
    if not sources:  # genindex, search, py-modindex
        return 0
    text = sources[0].read_text()
    return len(re.findall(r"!\[[^\]]*\]\([^)]+\)", text)) + len(
        re.findall(r"^(?:```\{(?:figure|image)\}|\.\. (?:figure|image)::)", text, re.M)
    )


_IDS: dict[Path, set[str]] = {}


def _ids(path: Path) -> set[str]:
    if path not in _IDS:
        _IDS[path] = set(re.findall(r'\bid="([^"]+)"', path.read_text()))
    return _IDS[path]


def broken_links(site: Path, base_url: str, hrefs: list[str]) -> list[str]:
    """The links among ``hrefs`` (absolute) into the site that lead to no file or id."""
    broken = []
    for href in hrefs:
        if not href.startswith(base_url):
            continue  # another site, or mailto: and the like: not checked offline
        url = urlsplit(href)
        target = site / unquote(url.path).lstrip("/")
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            broken.append(f"{href}: no such file")
        elif (
            url.fragment and target.suffix == ".html" and unquote(url.fragment) not in _ids(target)
        ):
            broken.append(f"{href}: no id {url.fragment!r} on the page")
    return broken


_DRAW = """
async () => {
  const images = [...document.images];
  for (const image of images) image.loading = "eager";
  await Promise.all(images.map((image) => image.complete ? null
      : new Promise((done) => { image.onload = image.onerror = done; })));
  if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
  const main = document.querySelector("article[role=main]") || document.body;
  return {
    undrawn: images.filter((image) => !(image.complete && image.naturalWidth > 0))
                   .map((image) => image.getAttribute("src")),
    figures: main.querySelectorAll("img").length,
    links: [...document.querySelectorAll("a[href]")].map((a) => a.href),
    quick: [...document.querySelectorAll(".sciml-quick-mode")].map((n) => n.textContent),
    math: main.querySelectorAll(".math").length,
    typeset: main.querySelectorAll(".math mjx-container").length,
  };
}
"""


def visit(browser: object, url: str) -> tuple[dict, list[str], object]:
    """Open ``url``: what :data:`_DRAW` finds there, the errors it met and the open page."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    errors: list[str] = []
    page.on(
        "console",
        lambda m: (
            errors.append(f"console: {m.text} ({m.location.get('url')})")
            if m.type == "error"
            else None
        ),
    )
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.on(
        "response",
        lambda r: errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
    )
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, url
    page.wait_for_load_state("networkidle")
    found = page.evaluate(_DRAW)
    return found, errors, page


def test_every_page_loads_draws_its_figures_and_links_only_to_pages_that_exist(
    site: Path, base_url: str, browser: object
) -> None:
    names = pages(site)
    assert "index.html" in names and "api/index.html" in names
    notebooks = [name for name in names if name.startswith("notebooks/")]
    assert len(notebooks) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    problems: list[str] = []
    figures: dict[str, int] = {}
    for name in names:
        found, errors, page = visit(browser, base_url + name)
        page.close()
        problems += [f"{name}: {error}" for error in errors]
        problems += [f"{name}: image not drawn: {src}" for src in found["undrawn"]]
        expected = expected_figures(site, name)
        figures[name] = found["figures"]
        if found["figures"] != expected:
            problems.append(
                f"{name}: {found['figures']} figures drawn, its source names {expected}"
            )
        problems += [
            f"{name}: broken link {link}" for link in broken_links(site, base_url, found["links"])
        ]
        if found["typeset"] < found["math"]:
            problems.append(f"{name}: {found['typeset']} of {found['math']} formulas typeset")
        if name in notebooks and not any("quick mode" in text for text in found["quick"]):
            problems.append(f"{name}: no quick-mode note")
    assert not problems, "\n".join(problems)
    # every notebook shows figures; the demo's report shows its own
    assert all(figures[name] > 0 for name in notebooks), figures
    assert figures["demo/report.html"] > 0, figures


def test_screenshots_of_a_notebook_an_api_page_and_a_guide_page(
    site: Path, base_url: str, browser: object
) -> None:
    SCREENS.mkdir(parents=True, exist_ok=True)
    for file, name in SCREENSHOTS.items():
        found, errors, page = visit(browser, base_url + name)
        assert not errors, errors
        page.screenshot(path=str(SCREENS / file), full_page=True)
        page.close()
        assert (SCREENS / file).stat().st_size > 10_000, file


def test_links_into_the_site_are_checked(site: Path, base_url: str) -> None:
    """The link check itself: a missing page and a missing anchor are found."""
    index = base_url + "index.html"
    assert broken_links(site, base_url, [index, base_url, "https://example.org/x"]) == []
    assert broken_links(site, base_url, [base_url + "nowhere.html"]) == [
        f"{base_url}nowhere.html: no such file"
    ]
    assert broken_links(site, base_url, [index + "#no-such-id"]) == [
        f"{index}#no-such-id: no id 'no-such-id' on the page"
    ]
