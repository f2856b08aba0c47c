"""``python -m voxcache.cli``."""

import sys

from . import main

sys.exit(main())
