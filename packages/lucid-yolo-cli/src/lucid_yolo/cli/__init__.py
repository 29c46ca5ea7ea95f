"""lucid_yolo.cli."""

__all__: list[str] = []
