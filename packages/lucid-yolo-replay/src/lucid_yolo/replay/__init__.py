"""lucid_yolo.replay."""

__all__: list[str] = []
