#!/usr/bin/env python3
"""Write a Haizea image file (`[tracefile] imagefile`, manual Appendix B): N images of one size, then one image name
per request, each drawn uniformly at random with a fixed seed (same arguments, same bytes).

The defaults are the HPDC'08 setup's `37_uniform.images`: 37 images of 4,096 MB, 10,000 requests, uniform choice.
"""
from __future__ import annotations

import argparse
import random
import sys


def imagefile(images: int, size: int, requests: int, seed: int) -> str:
    rng = random.Random(seed)
    names = [f"image_{i}" for i in range(1, images + 1)]
    lines = [f"{name} {size}" for name in names] + ["#"]
    lines += [names[rng.randrange(images)] for _ in range(requests)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=37, help="how many distinct images (37)")
    parser.add_argument("--size", type=int, default=4096, help="size of each image in MB (4096)")
    parser.add_argument("--requests", type=int, default=10000, help="how many requests get an image (10000)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (1)")
    parser.add_argument("-o", "--out", help="file to write (default: standard output)")
    args = parser.parse_args()
    if min(args.images, args.size, args.requests) <= 0:
        parser.error("--images, --size and --requests must be positive")
    text = imagefile(args.images, args.size, args.requests, args.seed)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
