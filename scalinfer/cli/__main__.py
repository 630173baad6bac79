"""``python -m scalinfer.cli ARGS``: the `scalinfer` command."""

import sys

from scalinfer.cli import main

sys.exit(main())
