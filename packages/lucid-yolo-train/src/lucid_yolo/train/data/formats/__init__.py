"""Dataset file formats: Ultralytics YAML + txt rows, COCO json, DOTA txt, and converters."""

from lucid_yolo.train.data.formats.coco import (
    CocoDataset,
    CrowdPolicy,
    flip_idx_from_names,
    read_coco,
)
from lucid_yolo.train.data.formats.coco_writer import write_coco
from lucid_yolo.train.data.formats.convert import (
    coco_to_ultralytics,
    keypoint_names_from_flip,
    ultralytics_to_coco,
)
from lucid_yolo.train.data.formats.dota import DOTA_V1_NAMES, DotaDataset, read_dota
from lucid_yolo.train.data.formats.geometry import COORD_TOLERANCE, merge_polygon_parts
from lucid_yolo.train.data.formats.mask_polygons import mask_to_polygons
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
    # COCO json
    "CocoDataset",
    "CrowdPolicy",
    "flip_idx_from_names",
    "read_coco",
    "write_coco",
    # COCO RLE masks as training polygons (the codec: lucid_yolo.train.geometry)
    "mask_to_polygons",
    # DOTA
    "DOTA_V1_NAMES",
    "DotaDataset",
    "read_dota",
    # conversion
    "coco_to_ultralytics",
    "keypoint_names_from_flip",
    "ultralytics_to_coco",
    # shared geometry
    "COORD_TOLERANCE",
    "merge_polygon_parts",
]
