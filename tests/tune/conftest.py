"""tests/tune: make the shared fakes (tune_fakes.py) importable, also from subprocess scripts."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
