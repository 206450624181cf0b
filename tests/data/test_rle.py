"""COCO's uncompressed RLE written with numpy alone (nlnet.data.detection.rle), read back by pycocotools."""

from __future__ import annotations

import numpy as np
import pytest

from nlnet.data.detection.coco import quiet_pycocotools
from nlnet.data.detection.rle import mask_bbox, mask_to_rle, rle_to_mask


def _masks():
    rng = np.random.default_rng(0)
    yield rng.random((7, 5)) > 0.5  # random pixels
    yield np.ones((3, 4), bool)  # first pixel set: counts start with a zero run
    yield np.zeros((4, 6), bool)
    m = np.zeros((6, 9), np.uint8)
    m[2:5, 3:8] = 255  # a block, non-binary values
    yield m


def test_runs_are_column_major_and_start_with_zeros():
    m = np.array([[0, 1, 1], [0, 1, 0]])  # columns: (0, 0), (1, 1), (1, 0)
    assert mask_to_rle(m) == {"counts": [2, 3, 1], "size": [2, 3]}
    assert mask_to_rle(np.ones((2, 2)))["counts"] == [0, 4]
    for mask in _masks():
        rle = mask_to_rle(mask)
        assert sum(rle["counts"]) == mask.size
        np.testing.assert_array_equal(rle_to_mask(rle), mask != 0)
    assert mask_bbox(np.array([[0, 0, 0], [0, 1, 1], [0, 1, 0]])) == [1.0, 1.0, 2.0, 2.0]
    assert mask_bbox(np.zeros((3, 3))) == [0.0, 0.0, 0.0, 0.0]


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="mask: expected a 2-D array"):
        mask_to_rle(np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="rle: expected uncompressed counts"):
        rle_to_mask({"counts": [1, 2], "size": [2, 2]})


def test_pycocotools_decodes_it_to_the_same_mask():
    mask_utils = pytest.importorskip("pycocotools.mask", reason="pycocotools is the coco extra")
    for mask in _masks():
        binary = (mask != 0).astype(np.uint8)
        with quiet_pycocotools():
            decoded = mask_utils.decode(mask_utils.frPyObjects(mask_to_rle(mask), *mask.shape))
            compressed = mask_utils.encode(np.asfortranarray(binary))
            box = [float(v) for v in mask_utils.toBbox(compressed)]
        np.testing.assert_array_equal(decoded, binary)
        if mask.any():  # pycocotools' box of the same mask
            assert mask_bbox(mask) == box
