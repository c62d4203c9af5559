"""`python -m tests.models.real_exports`: see listing.py."""

import sys

from tests.models.real_exports.listing import main

sys.exit(main())
