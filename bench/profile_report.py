"""Print the top of a cProfile dump (cumulative and own time).

python -m bench.profile_report OUT.prof [--top 30] [--filter appliance]
"""

from __future__ import annotations

import argparse
import pstats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--filter", default="")
    args = parser.parse_args()
    stats = pstats.Stats(args.path)
    stats.sort_stats("tottime").print_stats(*([args.filter] if args.filter else []), args.top)
    stats.sort_stats("cumulative").print_stats(*([args.filter] if args.filter else []), args.top)


if __name__ == "__main__":
    main()
