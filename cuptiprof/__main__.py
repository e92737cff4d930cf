import sys

from cuptiprof.cli import main

sys.exit(main())
