"""``python -m memcore ...``: the ``memcore`` command line, for when its script is not on PATH.

An MCP client started outside the virtual environment can run
``/path/to/venv/bin/python -m memcore mcp --store PATH``.
"""

import sys

from memcore.cli import main

if __name__ == "__main__":
    sys.exit(main())
