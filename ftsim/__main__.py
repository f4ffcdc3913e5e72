"""``python -m ftsim``: the command line (Ctrl-C while it starts up exits quietly, 130)."""

try:
    from ftsim.cli import main
except KeyboardInterrupt:
    raise SystemExit(130) from None

raise SystemExit(main())
