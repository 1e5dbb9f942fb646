"""Copies of images between nodes packed into rounds (Haizea's migration rounds). A leaf module: the overheads and
the image-transfer bookkeeping both use it, and each is imported by modules the other imports."""
from __future__ import annotations

from typing import Iterable


def copy_rounds(copies: Iterable[tuple[int, int, int]]) -> list[dict[int, int]]:
    """(vnode, origin, dest) copies packed into rounds in which no node sends or receives twice, each copy into the
    first round that has neither of its nodes: [{vnode: origin}]."""
    rounds: list[tuple[set[int], dict[int, int]]] = []
    for vnode, origin, dest in copies:
        for busy, moves in rounds:
            if origin not in busy and dest not in busy:
                break
        else:
            busy, moves = set(), {}
            rounds.append((busy, moves))
        busy.update((origin, dest))
        moves[vnode] = origin
    return [moves for _, moves in rounds]
