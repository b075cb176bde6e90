import sys

from harness.commands.main import main

sys.exit(main())
