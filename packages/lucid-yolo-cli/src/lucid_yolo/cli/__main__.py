"""``python -m lucid_yolo.cli``: the ``lucid-yolo`` command without the console script."""

import sys

from lucid_yolo.cli.main import main

sys.exit(main())
