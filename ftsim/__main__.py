"""``python -m ftsim``: the command line (Ctrl-C while it starts up: "interrupted", 130)."""

import sys

try:
    from ftsim.cli import command
except KeyboardInterrupt:
    print("ftsim: interrupted", file=sys.stderr)  # as later: nothing was written yet
    raise SystemExit(130) from None

command()
