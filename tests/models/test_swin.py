"""Swin from nlnet window attention: torchvision's weights load and the outputs agree (float64)."""

from __future__ import annotations

import pytest
import torch
from torchvision.models.swin_transformer import SwinTransformer as TVSwin

from nlnet.models import create_model
from nlnet.models.swin import (
    SwinTransformer,
    load_torchvision_swin,
    merge_patches,
    swin_state_dict_from_torchvision,
)

TINY = dict(embed_dim=8, depths=[2, 2, 2], num_heads=[1, 2, 2], window_size=[4, 4])


@pytest.mark.parametrize("size", [(32, 32), (36, 28)])  # padded windows, odd merges
def test_torchvision_state_dict_loads_and_outputs_agree_float64(size, torchvision_parity):
    ref = TVSwin(patch_size=[2, 2], num_classes=7, **TINY)
    ours = SwinTransformer(
        patch_size=2, embed_dim=8, depths=(2, 2, 2), num_heads=(1, 2, 2), window_size=4,
        num_classes=7,
    )  # fmt: skip
    x = torch.randn(2, 3, *size, dtype=torch.float64)
    torchvision_parity(ours, ref, load_torchvision_swin, x, scale=0.3)


def test_full_size_swin_t_keys_and_shapes_match_torchvision_on_meta(full_size_keys_match):
    import torchvision

    with torch.device("meta"):
        tv, ours = torchvision.models.swin_t(), create_model("swin_t")
    # torchvision stores the relative position index; nlnet recomputes it
    full_size_keys_match(tv, ours, swin_state_dict_from_torchvision, ("relative_position_index",))


def test_merge_patches_groups_2x2_neighbours():
    x = torch.arange(16.0).reshape(1, 4, 4, 1)
    out = merge_patches(x)  # (1, 2, 2, 4)
    assert out.shape == (1, 2, 2, 4)
    assert out[0, 0, 0].tolist() == [0.0, 4.0, 1.0, 5.0]  # (r0,c0), (r1,c0), (r0,c1), (r1,c1)
    assert merge_patches(torch.ones(1, 3, 5, 2)).shape == (1, 2, 3, 8)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="depths/num_heads"):
        SwinTransformer(depths=(2, 2), num_heads=(1,))
    with pytest.raises(ValueError, match="unexpected torchvision Swin key 'features.0.5.weight'"):
        swin_state_dict_from_torchvision({"features.0.5.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"x: expected 3 channels"):
        create_model("swin_tiny")(torch.randn(1, 1, 32, 32))
