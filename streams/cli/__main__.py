"""``python -m streams.cli``: the same CLI as the ``headrace`` command."""

import sys

from streams.cli import main

sys.exit(main())
