"""3D segmentation data (nlnet.data.segmentation.volumes): the .npy and NIfTI folders, per-case z-score over
the nonzero voxels, label_map, random patches and flips, padding collate, 3D metrics."""

from __future__ import annotations

import sys

import helpers  # tests/journeys/helpers.py (pytest pythonpath)
import numpy as np
import pytest
import torch

from nlnet.data.segmentation.volumes import (
    VolumeFolder,
    collate_volumes,
    random_flip,
    zscore_nonzero,
)
from nlnet.engine.tasks.segmentation import confusion_matrix

SHAPE = (4, 10, 16, 18)  # (C, D, H, W): sizes that are not multiples of a U-Net's stride


@pytest.fixture(scope="module")
def npy_root(tmp_path_factory):
    return helpers.volume_tree(tmp_path_factory.mktemp("vol"), shape=SHAPE, splits=("train",))


def test_items_are_normalised_over_the_nonzero_voxels_and_mapped(npy_root):
    raw = np.load(npy_root / "train" / "images" / "case0.npy")
    raw_mask = np.load(npy_root / "train" / "masks" / "case0.npy")
    ds = VolumeFolder(npy_root, "train", label_map={4: 3}, num_classes=4)
    assert len(ds) == 2 and ds.cases == ["case0", "case1"]
    item = ds[0]
    assert set(item) == {"image", "mask", "index"}
    vol, mask, index = item["image"], item["mask"], item["index"]
    assert vol.shape == SHAPE and vol.dtype == torch.float32 and index == 0
    assert mask.shape == SHAPE[1:] and mask.dtype == torch.int64
    fg = torch.from_numpy((raw != 0).any(0))
    assert 0 < int(fg.sum()) < fg.numel()  # a zero border: the "outside of the brain"
    for c in range(SHAPE[0]):  # each channel: mean 0, std 1 over the foreground, 0 outside
        assert float(vol[c][fg].mean()) == pytest.approx(0.0, abs=1e-5)
        assert float(vol[c][fg].std(unbiased=False)) == pytest.approx(1.0, abs=1e-4)
        assert bool((vol[c][~fg] == 0).all())
        expected = (raw[c][fg.numpy()] - raw[c][fg.numpy()].mean()) / raw[c][fg.numpy()].std()
        assert np.allclose(vol[c][fg].numpy(), expected, atol=1e-4)
    assert set(np.unique(raw_mask)) == {0, 2, 4}
    assert torch.equal(mask == 3, torch.from_numpy(raw_mask == 4))  # label_map {4: 3}
    assert torch.equal(mask == 2, torch.from_numpy(raw_mask == 2))
    with pytest.raises(ValueError, match=r"value 4 outside \[0, 4\).*label_map"):
        VolumeFolder(npy_root, "train", num_classes=4)[0]  # unmapped BraTS label 4


def test_zscore_without_nonzero_voxels_uses_all_of_them():
    x = torch.zeros(2, 3, 3, 3)
    assert torch.equal(zscore_nonzero(x), x)
    y = zscore_nonzero(torch.arange(54.0).view(2, 3, 3, 3) - 10)  # one zero voxel in channel 0
    assert float(y[1].mean()) == pytest.approx(0.0, abs=1e-5)


def test_random_patches_are_windows_of_the_case(npy_root):
    full = VolumeFolder(npy_root, "train", label_map={4: 3})[1]
    ds = VolumeFolder(npy_root, "train", label_map={4: 3}, patch=(8, 8, 8))
    torch.manual_seed(0)
    starts = set()
    for _ in range(6):
        patch = ds[1]  # one draw: image and mask of the same random window
        vol, mask = patch["image"], patch["mask"]
        assert vol.shape == (4, 8, 8, 8) and mask.shape == (8, 8, 8)
        hits = [
            (z, y, x)
            for z in range(SHAPE[1] - 7)
            for y in range(SHAPE[2] - 7)
            for x in range(SHAPE[3] - 7)
            if torch.equal(full["image"][:, z : z + 8, y : y + 8, x : x + 8], vol)
        ]
        assert len(hits) == 1  # the patch is a window of the normalised case ...
        z, y, x = hits[0]
        assert torch.equal(
            full["mask"][z : z + 8, y : y + 8, x : x + 8], mask
        )  # ... with its labels
        starts.add(hits[0])
    assert len(starts) > 1  # at random positions
    big = VolumeFolder(npy_root, "train", patch=(12, 16, 20), ignore_index=255)[0]
    assert big["image"].shape == (4, 12, 16, 20)  # padded where the case is smaller than the patch
    assert bool((big["mask"][10:] == 255).all()) and bool((big["image"][:, 10:] == 0).all())
    assert bool((big["mask"][:, :, 18:] == 255).all())


def test_random_flip_mirrors_volume_and_mask_alike():
    vol = torch.arange(2 * 4 * 5 * 6, dtype=torch.float32).view(2, 4, 5, 6)
    mask = vol[0].long()
    corners = set()
    for seed in range(16):
        v, m = random_flip(vol, mask, 0.5, torch.Generator().manual_seed(seed))
        assert torch.equal(v[0].long(), m) and torch.equal(v[1] - v[0], vol[1] - vol[0])
        corners.add(int(m[0, 0, 0]))  # which corner comes first: the mirrored axes
    assert len(corners) >= 4  # different axes mirrored for different draws
    v, m = random_flip(vol, mask, 0.0)
    assert v is vol and m is mask


def test_collate_pads_to_the_largest_case_with_ignore_index():
    a = {
        "image": torch.ones(2, 4, 6, 6),
        "mask": torch.zeros(4, 6, 6, dtype=torch.long),
        "index": 0,
    }
    b = {"image": torch.ones(2, 5, 4, 6), "mask": torch.ones(5, 4, 6, dtype=torch.long), "index": 1}
    batch = collate_volumes([a, None, b], ignore_index=9)
    vols, masks, index = batch["image"], batch["mask"], batch["index"]
    assert batch["skipped"] == 1
    assert vols.shape == (2, 2, 5, 6, 6) and masks.shape == (2, 5, 6, 6)
    assert index.tolist() == [0, 1]
    assert bool((masks[0, 4] == 9).all()) and bool((vols[0, :, 4] == 0).all())
    assert bool((masks[1, :, 4:] == 9).all()) and int((masks == 9).sum()) == 36 + 2 * 5 * 6
    empty = collate_volumes([None])
    assert empty["image"].shape[0] == 0 and empty["skipped"] == 1


def test_confusion_matrix_counts_3d_masks():
    gen = torch.Generator().manual_seed(0)
    target = torch.randint(0, 3, (2, 4, 5, 6), generator=gen)
    pred = torch.randint(0, 3, (2, 4, 5, 6), generator=gen)
    target[0, 0] = 255  # ignored voxels
    conf = confusion_matrix(pred, target, 3)
    keep = target != 255
    assert int(conf.sum()) == int(keep.sum())
    for t in range(3):
        for p in range(3):
            assert int(conf[t, p]) == int(((target == t) & (pred == p)).sum())


def test_layout_errors_name_the_case(tmp_path):
    root = helpers.volume_tree(tmp_path, cases=1, shape=(1, 8, 8, 8), splits=("train",))
    (root / "train" / "images" / "extra.npy").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="'extra' has no mask"):
        VolumeFolder(root, "train")
    (root / "train" / "masks" / "extra.npy").write_bytes(b"")  # an empty (bad) case
    with pytest.raises(ValueError, match="empty or truncated"):
        VolumeFolder(root, "train")[1]
    with pytest.warns(UserWarning, match="skipping case extra"):
        assert VolumeFolder(root, "train", skip_bad=True)[1] is None
    with pytest.raises(FileNotFoundError, match="val/images"):
        VolumeFolder(root, "val")


def test_nifti_cases_one_file_per_modality(tmp_path, npy_root):
    pytest.importorskip("nibabel")  # the `medical` extra (installed with `dev` in CI)
    root = helpers.volume_tree(tmp_path, shape=SHAPE, splits=("train",), nifti=True)
    names = sorted(p.name for p in (root / "train" / "images").iterdir())
    assert names[:2] == ["case0_m0.nii.gz", "case0_m1.nii.gz"] and len(names) == 8
    mods = ("m0", "m1", "m2", "m3")
    nii = VolumeFolder(root, "train", modalities=mods, label_map={4: 3}, num_classes=4)
    ref = VolumeFolder(npy_root, "train", label_map={4: 3}, num_classes=4)  # same seed, .npy
    assert nii.cases == ["case0", "case1"]
    for i in range(2):
        (v, m), (rv, rm) = (nii[i]["image"], nii[i]["mask"]), (ref[i]["image"], ref[i]["mask"])
        assert torch.allclose(v, rv, atol=1e-5) and torch.equal(m, rm)
    shuffled = VolumeFolder(root, "train", modalities=("m3", "m2", "m1", "m0"))[0]["image"]
    assert torch.allclose(shuffled, ref[0]["image"].flip(0), atol=1e-5)  # channels in that order
    import nibabel

    msd = tmp_path / "msd" / "train"  # one 4D file per case, channels last (the Decathlon's)
    for sub, arr in (("images", np.moveaxis(np.load(npy_root / "train/images/case0.npy"), 0, -1)),
                     ("masks", np.load(npy_root / "train/masks/case0.npy"))):  # fmt: skip
        (msd / sub).mkdir(parents=True)
        nibabel.save(nibabel.Nifti1Image(arr, np.eye(4)), msd / sub / "case0.nii.gz")
    msd_item = VolumeFolder(msd.parent, "train", label_map={4: 3})[0]
    v, m = msd_item["image"], msd_item["mask"]
    assert torch.allclose(v, ref[0]["image"], atol=1e-5) and torch.equal(m, ref[0]["mask"])
    with pytest.raises(FileNotFoundError, match="case0_m3.nii.gz is not named <case>_<mod"):
        VolumeFolder(root, "train", modalities=mods[:3])  # a file of no listed modality
    (root / "train" / "images" / "case1_m2.nii.gz").unlink()
    with pytest.raises(FileNotFoundError, match="'case1' lacks modality 'm2'"):
        VolumeFolder(root, "train", modalities=mods)


def test_nifti_without_nibabel_is_one_line(tmp_path, monkeypatch):
    from nlnet.engine.errors import MissingPackageError
    from nlnet.engine.tasks.segmentation import SegmentationTask

    for sub in ("images", "masks"):
        (tmp_path / "train" / sub).mkdir(parents=True)
        (tmp_path / "train" / sub / "c0.nii.gz").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "nibabel", None)  # import nibabel -> ImportError
    task = SegmentationTask(4, data={"root": str(tmp_path), "kind": "volume"})
    with pytest.raises(MissingPackageError) as err:
        task.build_dataset("train")
    assert str(err.value).count("\n") == 0 and "pip install 'nlnet[medical]'" in str(err.value)


def test_non_finite_voxels_are_background_not_a_nan_volume():
    """One NaN voxel made every statistic NaN, so a whole case predicted background."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 6, 7) + 3
    x[:, :2] = 0
    y = x.clone()
    y[0, 3, 3, 3], y[1, 4, 4, 4] = float("nan"), float("inf")
    z = zscore_nonzero(y)
    assert torch.isfinite(z).all() and z[0, 3, 3, 3] == 0 and z[1, 4, 4, 4] == 0
    ok = torch.isfinite(y[0]) & (y[0] != 0)
    assert torch.allclose(z[0][ok].mean(), torch.tensor(0.0), atol=1e-6)  # over finite voxels
    assert torch.allclose(z[0][ok].std(unbiased=False), torch.tensor(1.0), atol=1e-5)


def test_a_case_of_other_channels_is_a_bad_case(tmp_path):
    """One case of 2 channels among 1-channel cases (a modality too many): the folder's count is
    the one most cases have (read from the headers), that case is skipped and named, and the
    batch stacks; a count given to the folder wins."""
    from nlnet.data.segmentation.volumes import case_channels, common_channels

    root = helpers.volume_tree(tmp_path, cases=3, shape=(1, 8, 8, 8), splits=("train",))
    odd = root / "train" / "images" / "case1.npy"
    np.save(odd, np.concatenate([np.load(odd)] * 2))
    ds = VolumeFolder(root, "train", skip_bad=True)
    assert [case_channels(f) for f in ds.images] == [1, 2, 1] and ds.channels == 1
    with pytest.warns(UserWarning, match=r"case case1: 2 channel\(s\) where the dataset's cases"):
        batch = collate_volumes([ds[i] for i in range(3)])
    assert batch["image"].shape == (2, 1, 8, 8, 8) and batch["skipped"] == 1
    assert VolumeFolder(root, "train", channels=2)[1]["image"].shape[0] == 2
    with pytest.raises(ValueError, match=r"1 channel\(s\) where the dataset's cases have 2"):
        VolumeFolder(root, "train", channels=2)[0]
    (root / "train" / "images" / "case2.npy").write_bytes(b"not a volume")
    assert common_channels(ds.images[1:]) == 2  # a tie of one: the first readable case's
    assert case_channels([root / "train" / "images" / "case2.npy"]) is None
