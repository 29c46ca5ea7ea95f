"""Help text without reStructuredText markup."""

from __future__ import annotations

import re

import pytest

from lucid_yolo.cli.help_format import plain_text
from lucid_yolo.cli.main import main

MARKUP = re.compile(r":[a-z]+:`|``")


@pytest.mark.parametrize(
    ("text", "plain"),
    [
        (":class:`YoloModule` options", "YoloModule options"),
        ("see :mod:`.coco_yaml`", "see coco_yaml"),
        ("the :data:`~lucid_yolo.cli.RUNS` folder", "the RUNS folder"),
        (":py:meth:`lucid_yolo.train.YoloModule.fit`", "lucid_yolo.train.YoloModule.fit"),
        ('Default: ``"auto"``.', 'Default: "auto".'),
    ],
)
def test_plain_text_drops_markup(text: str, plain: str) -> None:
    assert plain_text(text) == plain


def test_fit_help_has_no_markup_and_data_yaml_is_optional(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    out = capsys.readouterr().out
    assert MARKUP.search(out) is None, MARKUP.search(out)
    assert "[--data.yaml YAML]" in out
    yaml_help = out.split("ARG:   --data.yaml YAML", 1)[1].split("ARG:", 1)[0]
    assert "required" not in yaml_help
    assert "default: synthetic" in yaml_help
