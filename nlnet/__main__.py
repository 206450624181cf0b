import sys

from nlnet.cli import main

sys.exit(main())
