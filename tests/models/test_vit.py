"""ViT from nlnet layers: torchvision's weights load and the outputs agree (float64)."""

from __future__ import annotations

import pytest
import torch
from torchvision.models.vision_transformer import VisionTransformer as TVViT

from nlnet.models import create_model
from nlnet.models.vit import (
    VisionTransformer,
    load_torchvision_vit,
    vit_state_dict_from_torchvision,
)

TINY = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=24)


def test_torchvision_state_dict_loads_and_outputs_agree_float64(torchvision_parity):
    x = torch.randn(3, 3, 32, 32, dtype=torch.float64)
    ours, ref = VisionTransformer(num_classes=7, **TINY), TVViT(num_classes=7, **TINY)
    torchvision_parity(ours, ref, load_torchvision_vit, x, scale=0.5)


def test_loads_from_a_file(tmp_path, randomise):
    ref = randomise(TVViT(num_classes=5, **TINY).eval(), 0.5)
    torch.save(ref.state_dict(), tmp_path / "vit.pth")
    model = create_model(
        "vit_tiny", num_classes=5, weights=str(tmp_path / "vit.pth"), **TINY
    ).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x), rtol=1e-5, atol=1e-5)


def test_full_size_vit_b_16_keys_and_shapes_match_torchvision_on_meta(full_size_keys_match):
    import torchvision

    with torch.device("meta"):
        tv, ours = torchvision.models.vit_b_16(), create_model("vit_b_16")
    full_size_keys_match(tv, ours, vit_state_dict_from_torchvision)


def test_unknown_key_and_bad_size_are_clear_errors():
    with pytest.raises(ValueError, match="unexpected torchvision ViT key 'encoder.extra'"):
        vit_state_dict_from_torchvision({"encoder.extra": torch.zeros(1)})
    with pytest.raises(ValueError, match="image_size"):
        VisionTransformer(image_size=30, patch_size=8)
    with pytest.raises(ValueError, match=r"x: expected an image batch \(B, 3, 32, 32\)"):
        create_model("vit_tiny")(torch.randn(1, 3, 24, 24))
    with pytest.raises(ValueError, match="torchvision has no weights for .vit_tiny."):
        create_model("vit_tiny", weights="NO_SUCH_WEIGHTS")
