"""Matplotlib figures as inline SVG: text kept as text (searchable, no font files), no metadata or namespace URLs,
ids made unique per figure so that several figures live in one HTML page. Pure (no file, no clock)."""
from __future__ import annotations

import io
import re

import matplotlib

matplotlib.use("Agg")   # no display: figures are only ever written out

from matplotlib.figure import Figure  # noqa: E402

STYLE = {
    "svg.fonttype": "none",        # <text> elements: labels stay readable and checkable, no glyph paths
    "svg.hashsalt": "optlease",    # ids from content, not from a random salt: the same data, the same file
    "font.size": 9,
    "savefig.dpi": 150,            # the resolution of what is rasterized (occupancy images, thousands of boxes)
    "axes.grid": True,
    "grid.alpha": 0.3,
}
# kinds of leases, the same colour in every figure
KIND_COLOURS = {"ar": "#d62728", "best-effort": "#1f77b4", "immediate": "#2ca02c"}


def new_figure(width: float, height: float) -> Figure:
    """A figure of `width` x `height` inches, not registered with pyplot (no global state)."""
    with matplotlib.rc_context(STYLE):
        return Figure(figsize=(width, height), layout="constrained")


_ID = re.compile(r'\bid="([^"]+)"')


def to_svg(fig: Figure, prefix: str) -> str:
    """The figure as an <svg> element for an HTML page; `prefix` makes its ids unique in the page."""
    buf = io.StringIO()
    with matplotlib.rc_context(STYLE):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    # the namespaces are implied by <svg> inside HTML; dropping them leaves no URL in the page
    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)
    ids = set(_ID.findall(text))
    text = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', text)
    text = re.sub(r"#([\w.-]+)", lambda m: f"#{prefix}-{m.group(1)}" if m.group(1) in ids else m.group(0), text)
    return text.replace('xlink:href="#', 'href="#')
