"""`python -m tensorforge ...`: the tensorforge command."""

import sys

from tensorforge.cli import main

sys.exit(main())
