"""PyInstaller's entry script for both executables (``sidelight`` and ``sidelight-cli``)."""

import sys

from engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
