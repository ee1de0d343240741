import sys

from lmlab.cli import main

sys.exit(main())
