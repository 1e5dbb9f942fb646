"""`[simulation] resources` as the site: Haizea's `<numnodes> TYPE:AMOUNT ...` string, or a grid description
file (`sss:FILE`, an SSS node object document; `glue:FILE`, a GLUE 1.1 cluster in LDIF or XML), the file named
relative to the configuration."""
from __future__ import annotations

from typing import Callable

from optlease.domain.site import Site
from optlease.errors import InputError

GRID_PREFIXES = ("sss:", "glue:")


def site_from_resources(text: str, where: str | None, resolve: Callable[[str], str]) -> Site:
    """The site `text` describes; errors name `where` (the configuration) or the grid file's line."""
    kind, sep, name = text.partition(":")
    if sep and f"{kind}:" in GRID_PREFIXES:
        if not name.strip():
            raise InputError(f"[simulation] resources: {kind}: needs a file name ({kind}:FILE)", where)
        path = resolve(name.strip())
        if kind == "sss":
            from optlease.formats.sss import load_sss
            return load_sss(path)
        from optlease.formats.glue import load_glue_site
        return load_glue_site(path)
    try:
        return Site.parse_resources(text)
    except InputError as exc:
        raise InputError(f"[simulation] resources: {exc.message}", where) from None
