"""lucid_yolo.models."""

__all__: list[str] = []
