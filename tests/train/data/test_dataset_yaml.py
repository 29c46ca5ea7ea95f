"""Dataset YAML: key parsing, path resolution and every malformed-YAML message."""

from __future__ import annotations

from pathlib import Path

import pytest

from lucid_yolo.train.data.dataset_yaml import load_dataset_yaml
from lucid_yolo.train.data.errors import DatasetConfigError


def _yaml(root: Path, text: str, folders: tuple[str, ...] = ("images/train", "images/val")) -> Path:
    for folder in folders:
        (root / folder).mkdir(parents=True, exist_ok=True)
    path = root / "data.yaml"
    path.write_text(text)
    return path


def test_load_dataset_yaml_names_list_and_default_root(tmp_path: Path) -> None:
    spec = load_dataset_yaml(
        _yaml(tmp_path, "train: images/train\nval: images/val\nnames: [a, b]\n")
    )
    assert spec.names == ("a", "b")
    assert spec.num_classes == 2
    assert spec.task == "detect"
    assert spec.root == tmp_path.resolve()
    assert spec.splits["train"] == ((tmp_path / "images" / "train").resolve(),)
    assert "test" not in spec.splits


def test_load_dataset_yaml_names_dict(tmp_path: Path) -> None:
    text = "train: images/train\nval: images/val\nnames: {1: b, 0: a}\nnc: 2\n"
    assert load_dataset_yaml(_yaml(tmp_path, text)).names == ("a", "b")


def test_load_dataset_yaml_relative_path_starts_at_yaml_folder(tmp_path: Path) -> None:
    (tmp_path / "sets" / "one" / "images" / "train").mkdir(parents=True)
    (tmp_path / "sets" / "one" / "images" / "val").mkdir(parents=True)
    (tmp_path / "sets" / "one" / "images" / "test").mkdir(parents=True)
    path = tmp_path / "sets" / "one.yaml"
    path.write_text(
        "path: one\ntrain: images/train\nval: images/val\ntest: images/test\nnames: [a]\n"
    )
    spec = load_dataset_yaml(path)
    assert spec.root == (tmp_path / "sets" / "one").resolve()
    assert spec.splits["test"] == ((tmp_path / "sets" / "one" / "images" / "test").resolve(),)


def test_load_dataset_yaml_kpt_shape_implies_pose(tmp_path: Path) -> None:
    text = (
        "train: images/train\nval: images/val\nnames: [p]\nkpt_shape: [3, 3]\nflip_idx: [0, 2, 1]\n"
    )
    spec = load_dataset_yaml(_yaml(tmp_path, text))
    assert spec.task == "pose"
    assert spec.kpt_shape == (3, 3)
    assert spec.flip_idx == (0, 2, 1)


def test_load_dataset_yaml_task_argument_overrides_yaml(tmp_path: Path) -> None:
    text = "train: images/train\nval: images/val\nnames: [a]\ntask: obb\n"
    assert load_dataset_yaml(_yaml(tmp_path, text), task="segment").task == "segment"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("train: images/train\nval: images/val\n", r"no `names`; add the class names"),
        ("train: images/train\nval: images/val\nnames: [a]\nnc: 3\n", r"`nc` is 3 but `names`"),
        ("train: images/train\nval: images/val\nnames: {0: a, 2: b}\n", r"keys must be 0\.\.1"),
        ("train: images/train\nval: images/val\nnames: a\n", r"`names` must be a list or a dict"),
        ("val: images/val\nnames: [a]\n", r"no `train` split; add `train: images/train`"),
        ("train: images/nope\nval: images/val\nnames: [a]\n", r"`train` path 'images/nope' does"),
        ("- a\n- b\n", r"must be a mapping of keys"),
        (
            "train: images/train\nval: images/val\nnames: [a]\nkpt_shape: [3, 4]\n",
            r"`kpt_shape` must be \[K, 2\] or \[K, 3\].*\[3, 4\]",
        ),
        (
            "train: images/train\nval: images/val\nnames: [a]\n"
            "kpt_shape: [2, 3]\nflip_idx: [0, 0]\n",
            r"`flip_idx` must be a permutation of 0\.\.1, got \[0, 0\]",
        ),
        (
            "train: images/train\nval: images/val\nnames: [a]\nflip_idx: [0]\n",
            r"without `kpt_shape`",
        ),
        ("train: images/train\nval: images/val\nnames: [a]\ntask: pose\n", r"task 'pose' needs"),
        ("train: images/train\nval: images/val\nnames: [a]\ntask: cls\n", r"task 'cls' is unknown"),
    ],
)
def test_load_dataset_yaml_bad_yaml_names_file_and_fix(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(DatasetConfigError, match=rf"data\.yaml: .*{message}"):
        load_dataset_yaml(_yaml(tmp_path, text))


def test_load_dataset_yaml_syntax_error_is_one_line_with_file_and_line(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "names: [a]\ntrain: images/train\n  val: images/val\n")
    with pytest.raises(DatasetConfigError) as caught:
        load_dataset_yaml(path)
    message = str(caught.value)
    assert message.startswith(
        f"{path}:3: not valid YAML at column 6: mapping values are not allowed here"
    )
    assert "\n" not in message


def test_load_dataset_yaml_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetConfigError, match=r"nope\.yaml: cannot read the dataset YAML"):
        load_dataset_yaml(tmp_path / "nope.yaml")


def test_load_dataset_yaml_never_builds_python_objects(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = _yaml(
        tmp_path,
        f"names: !!python/object/apply:os.system ['touch {marker}']\n"
        "train: images/train\nval: images/val\n",
    )
    with pytest.raises(
        DatasetConfigError, match=r"not valid YAML .*could not determine a constructor"
    ):
        load_dataset_yaml(path)
    assert not marker.exists()
