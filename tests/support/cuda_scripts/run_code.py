"""Runs the Python code given as its argument (a one-off CUDA snippet for `hybrid run`)."""

import sys

exec(compile(sys.argv[1], "<snippet>", "exec"), {"__name__": "__main__"})
