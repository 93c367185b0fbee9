"""Suite-wide settings.

Under CI (the CI environment variable set) hypothesis runs derandomized, so a CI failure can be
replayed exactly; on a developer machine it explores new examples each run and remembers failures in
.hypothesis/.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
