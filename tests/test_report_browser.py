"""The report as a person sees it: rendered by headless Chromium (Debian's package) offline, the screenshot shows the
table and every plot, none of them blank."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from test_report import Refs, report, runs  # noqa: F401 (the fixtures: a report of six runs)

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                                         "(scripts/setup.sh test installs it)")
HEADER = np.array([0xee, 0xee, 0xff])   # the tables' header background (report CSS)


def screenshot(page: Path, png: Path, height: int) -> np.ndarray:
    # no network at all: the page must not need it
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>", f"--window-size=1000,{height}",
                    f"--screenshot={png}", page.as_uri()], capture_output=True, timeout=60, check=True)
    return np.asarray(Image.open(png).convert("RGB")).astype(int)


def blocks(image: np.ndarray) -> list[tuple[int, int]]:
    """(top, bottom) of each band of rows with something drawn, the bands parted by blank rows."""
    inked = (image < 245).any(axis=2).any(axis=1)
    out, top = [], None
    for y, ink in enumerate([*inked, False]):
        if ink and top is None:
            top = y
        elif not ink and top is not None:
            out.append((top, y))
            top = None
    return out


def test_chromium_shows_the_table_and_every_plot(report, tmp_path):  # noqa: F811
    html = (report / "report.html").read_text()
    refs = Refs()
    refs.feed(html)
    image = screenshot(report / "report.html", tmp_path / "report.png", 5000)
    assert (image[-40:] >= 245).all(), "the page is longer than the screenshot"
    # tall bands: the figures table, each figure in its frame, the table of runs (headings and notes are short)
    tall = [(a, b) for a, b in blocks(image) if b - a >= 60]
    assert len(tall) == 2 + len(refs.svg_text) == 6
    for a, b in (tall[0], tall[-1]):
        region = image[a:b]
        assert (np.abs(region - HEADER).sum(axis=2) <= 6).sum() > 1000      # a header row
        assert ((region < 100).all(axis=2)).sum() > 300                      # dark text in the cells
    for a, b in tall[1:-1]:
        region = image[a:b]
        drawn = (region < 245).any(axis=2).mean()
        colour = (region.max(axis=2) - region.min(axis=2) > 60).sum()        # lines, bars, leases: not grey
        text = ((region < 100).all(axis=2)).sum()                            # axis labels and ticks
        assert drawn > 0.03 and colour > 500 and text > 300, (a, b, drawn, colour, text)
