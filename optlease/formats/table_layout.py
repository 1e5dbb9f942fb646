"""Haizea's layout of the client tables (`haizea-list-leases` and its kin): left-aligned columns, each as wide as
its longest value plus two and at least its own width. One module for the daemon, which keeps the lease table
formatted (engine.lease_table), and for the CLI, which formats what older servers send (cli.listing); it imports
nothing, so the CLI's fast path stays light."""
from __future__ import annotations

# the lease table's columns and their narrowest widths
COLUMNS = (("ID", 5), ("Type", 14), ("State", 11), ("Starting time", 24), ("Ending time", 24), ("Duration", 14),
           ("Nodes", 7))
MIN_WIDTHS = tuple(width for _, width in COLUMNS)


def widths_of(rows: list[tuple], least: tuple[int, ...] = MIN_WIDTHS) -> tuple[int, ...]:
    """Each column's width for these rows: its longest value plus two, and at least `least`."""
    if not rows:
        return least
    return tuple(max(low, max(map(len, column)) + 2) for low, column in zip(least, zip(*rows)))


def format_lines(rows: list[tuple], widths: tuple) -> str:
    """The table's lines for these rows (no trailing blanks, no newline after the last)."""
    line = " " + "".join(f"{{:<{width}}}" for width in widths)
    return "\n".join([line.format(*row).rstrip() for row in rows])


def header(widths, columns=COLUMNS) -> str:
    return " " + "".join(f"{name:<{width}}" for (name, _), width in zip(columns, widths))


def format_table(rows: list[tuple], columns=COLUMNS) -> str:
    """The whole table: its header, then a line a row, each line ended."""
    widths = widths_of(rows, tuple(width for _, width in columns))
    return header(widths, columns) + "\n" + (format_lines(rows, widths) + "\n" if rows else "")
