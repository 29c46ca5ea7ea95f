"""``python -m lucid_yolo.cli``: the ``lucid-yolo`` command without the console script."""

from lucid_yolo.cli.main import run

run()
