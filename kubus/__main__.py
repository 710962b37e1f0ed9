import sys

from kubus.cli import main

sys.exit(main())
