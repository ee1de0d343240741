"""`python -m lmlab`: the `lmlab` command."""

import sys

from lmlab.cli import main

sys.exit(main())
