"""One module per subcommand; each has `register(subparsers)`."""

import argparse


def top_rows(text: str) -> int:
    """--top N: rows per table, 1 to a billion (a larger N would overflow the SQL LIMIT)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= n <= 1_000_000_000:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1 and at most 1000000000")
    return n
