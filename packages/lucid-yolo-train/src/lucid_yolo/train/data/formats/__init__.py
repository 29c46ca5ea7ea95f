"""Dataset file formats: Ultralytics YAML + txt rows, COCO json, DOTA txt, and converters."""

from lucid_yolo.train.data.formats.geometry import COORD_TOLERANCE, merge_polygon_parts
from lucid_yolo.train.data.formats.ultralytics import (
    label_path_for,
    list_split_images,
    load_split,
    read_label_file,
    scan_split,
    write_label_file,
)
from lucid_yolo.train.data.formats.ultralytics_rows import RowError, format_rows, parse_row

__all__ = [
    # Ultralytics layout
    "label_path_for",
    "list_split_images",
    "load_split",
    "read_label_file",
    "scan_split",
    "write_label_file",
    # Ultralytics rows
    "RowError",
    "format_rows",
    "parse_row",
    # shared geometry
    "COORD_TOLERANCE",
    "merge_polygon_parts",
]
