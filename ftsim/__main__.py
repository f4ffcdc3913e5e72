"""``python -m ftsim``: the command line."""

from ftsim.cli import main

raise SystemExit(main())
