"""``python -m ftsim``: the command line (Ctrl-C while it starts up exits quietly, 130)."""

try:
    from ftsim.cli import command
except KeyboardInterrupt:
    raise SystemExit(130) from None

command()
