"""lucid_yolo.train."""

__all__: list[str] = []
