import sys

from autosched.cli.app import main

sys.exit(main())
