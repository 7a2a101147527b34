#!/usr/bin/env python3
"""Print or validate token shards: a shortcut for `PYTHONPATH=scripts python -m vp_data.shards`.

  python scripts/inspect_shard.py inspect data/tinyshakespeare/*.bin --vptok data/tinyshakespeare/gpt2.vptok
  python scripts/inspect_shard.py validate 'data/slimpajama/*.bin' --vocab-size 50277
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vp_data.shards import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
