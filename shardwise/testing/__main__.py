"""``python -m shardwise.testing sink|source|model KIND``: a seam's contract, run on an installed kind.

Each check runs in a temporary folder of its own (local files, SQLite; no server). Exit 0 when every
check passes; 1 with one line naming the broken guarantee; 2 for an unknown seam or kind, naming the
installed ones.
"""

from __future__ import annotations

import sys

from shardwise.testing.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
