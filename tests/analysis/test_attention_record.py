"""Attention recording hooks and the index mapping back to frames, rows and columns."""

from __future__ import annotations

import pytest
import torch

from nlnet.analysis.attention_record import GridMapping, find_non_local_blocks, record_attention
from nlnet.layers.nonlocal_block import NonLocal2d, NonLocal3d
from nlnet.models.registry import create_model


def _tiny_nl_model():
    import nlnet.models  # noqa: F401  (registers the tiny models)

    torch.manual_seed(0)
    model = create_model("c2d_tiny_nl1", num_classes=3, width=2, dropout=0.0)
    for _, block in find_non_local_blocks(model):
        torch.nn.init.normal_(block.norm.weight)  # gamma = 0 would hide any change
    return model


@pytest.mark.parametrize("training", [True, False])
def test_recording_leaves_outputs_and_state_unchanged(training):
    model = _tiny_nl_model().train(training)
    x = torch.randn(2, 3, 4, 32, 32)
    ref_model = _tiny_nl_model().train(training)
    ref = ref_model(x)
    with record_attention(model) as rec:
        out = model(x)
    assert torch.equal(out, ref)
    # BN running statistics were updated exactly once, as without the recorder
    for (n1, b1), (_, b2) in zip(model.named_buffers(), ref_model.named_buffers()):
        assert torch.equal(b1, b2), n1
    (name,) = rec.names
    attn = rec.maps[name]
    m = rec.mapping(name, x.shape[2:])
    assert m.feature_size == (4, 4, 4)  # res4 of a 32x32 input: stride 8
    assert m.key_size == (4, 2, 2)  # (1, 2, 2) subsampling
    assert attn.shape == (2, m.num_queries, m.num_keys)
    torch.testing.assert_close(attn.sum(-1), torch.ones(2, m.num_queries))
    # hooks are removed when the context closes
    assert all(not b._forward_hooks for _, b in find_non_local_blocks(model))
    with torch.no_grad():
        model(x)
    assert rec.maps[name] is attn


def test_block_selection_errors():
    model = _tiny_nl_model()
    with pytest.raises(ValueError, match="unknown non-local block"):
        with record_attention(model, blocks=["layer9.non_local"]):
            pass
    with pytest.raises(ValueError, match="no non-local block"):
        with record_attention(create_model("c2d_tiny", width=2)):
            pass


def test_known_attention_maps_to_the_right_frame_row_and_column():
    """A Gaussian block (f = exp(x_i . x_j)) on features that match at exactly one key cell."""
    torch.manual_seed(0)
    C, T, H, W = 4, 3, 6, 8
    block = NonLocal3d(C, instantiation="gaussian", sub_sample=(1, 2, 2), scale=False).eval()
    x = torch.zeros(1, C, T, H, W)
    x[0, 0, 0, 1, 6] = 3.0  # the query: frame 0, row 1, column 6, direction e0
    x[0, 0, 2, 4, 1] = 6.0  # its match: frame 2, row 4, column 1 (key cell (2, 2, 0))
    x[0, 1] = 0.5  # everything else points along e1
    with record_attention(block) as rec:
        block(x)
    # the input of this "model" is 4x larger in space than the block grid (stride 4)
    m = rec.mapping("", input_size=(T, 4 * H, 4 * W))
    assert m.stride == (1.0, 4.0, 4.0)
    q = m.query_index((0, 4 * 1 + 2, 4 * 6 + 3))  # any pixel inside feature cell (0, 1, 6)
    assert m.query_cell(q) == (0, 1, 6)
    assert m.query_center(q) == (0.0, 5.5, 25.5)
    weights = rec.maps[""][0, q]
    j = int(weights.argmax())
    assert weights[j] > 0.9
    assert m.key_cell(j) == (2, 2, 0)  # row 4 // 2, column 1 // 2
    assert m.key_feature_box(j) == ((2, 3), (4, 6), (0, 2))
    assert m.key_box(j) == ((2.0, 3.0), (16.0, 24.0), (0.0, 8.0))
    assert m.key_center(j) == (2.0, 19.5, 3.5)
    assert m.key_index((2, 17, 6)) == j


def test_image_block_mapping_and_remainder_rows():
    block = NonLocal2d(4, sub_sample=True)
    m = GridMapping.for_block(block, (5, 4), input_size=(40, 32))
    assert m.key_size == (2, 2)  # floor pooling drops row 4
    assert m.key_index((39, 0)) == m.key_index((16, 0))  # the remainder row maps to the last cell
    assert m.key_center(3) == (23.5, 23.5)  # cell (1, 1): feature rows 2-3 = pixels 16-31
    with pytest.raises(ValueError, match="outside"):
        m.query_index((40, 0))
    with pytest.raises(ValueError, match="key index"):
        m.key_cell(4)
    with pytest.raises(ValueError, match="floor-pooled"):
        GridMapping((4, 4), (4, 4), (2, 2), (8, 8))
