"""The Python inference API: ``nlnet.load_model`` / ``nlnet.preprocessing`` / ``nlnet.predict``.

A tiny C2D checkpoint with stored preprocessing and a short real mp4 file; the API must give
the views ``nlnet eval``'s dataset gives, the scores of the model averaged over them, the
checkpoint's class names, and clear errors for bad input.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import nlnet
from nlnet.data.video.builder import VideoClipDataset, build_parts
from nlnet.data.video.config import VideoDataConfig
from nlnet.data.video_io.backends import read_frames, write_video
from nlnet.engine.checkpoint import save_checkpoint
from nlnet.engine.errors import CheckpointError, DataError
from nlnet.inference import Prediction, VideoTransform

PREP = {"mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3], "num_frames": 4, "stride": 2,
        "size": 24, "crop": None}  # fmt: skip
NAMES = ["red", "green", "blue"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inference")
    torch.manual_seed(0)
    model = nlnet.create_model("c2d_tiny_nl1", num_classes=3, width=4)
    ckpt = save_checkpoint(
        tmp / "final.pt", model=model, model_name="c2d_tiny_nl1", num_classes=3,
        class_names=NAMES, model_options={"width": 4}, preprocessing=PREP,
        config={"eval": {"clips": 3, "crops": 1}},
    )  # fmt: skip
    gen = torch.Generator().manual_seed(1)
    frames = torch.randint(0, 256, (11, 32, 40, 3), dtype=torch.uint8, generator=gen)
    video = write_video(tmp / "clip.mp4", frames)
    broken = tmp / "broken.mp4"
    broken.write_bytes(b"not a video")
    return {"ckpt": ckpt, "video": video, "broken": broken, "model": model}


def test_top_level_names_are_the_api():
    from nlnet import inference, layers, models

    assert nlnet.load_model is inference.load_model and nlnet.predict is inference.predict
    assert nlnet.preprocessing is inference.preprocessing
    assert nlnet.create_model is models.create_model and nlnet.NonLocal3d is layers.NonLocal3d
    assert set(nlnet.__all__) == {"__version__", *nlnet._LAZY}
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        nlnet.nope  # noqa: B018


def test_load_model_rebuilds_the_network(files):
    model = nlnet.load_model(files["ckpt"])
    assert not model.training and model.nlnet_info.class_names == NAMES
    for (n, a), b in zip(files["model"].state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), n
    assert model.nlnet_transform == nlnet.preprocessing(files["ckpt"])


def test_preprocessing_matches_the_evaluation_dataset(files):
    transform = nlnet.preprocessing(files["ckpt"])
    assert (transform.num_frames, transform.stride, transform.size, transform.clips) == (
        4,
        2,
        24,
        3,
    )
    views = transform(files["video"])
    assert views.shape == (3, 3, 4, 24, 30)  # shorter side 32 -> 24, 40 -> 30
    data = VideoDataConfig(num_frames=4, stride=2, test_scale=24, mean=PREP["mean"],
                           std=PREP["std"])  # fmt: skip
    dataset = VideoClipDataset([(files["video"], 0)], NAMES, **build_parts(data, False, clips=3))
    expected = torch.stack([dataset[i]["clip"] for i in range(len(dataset))])
    assert torch.equal(views, expected)
    frames = read_frames(files["video"], range(11))
    assert torch.equal(transform(frames), views)  # decoded frames = the file
    three = transform.replace(crops=3, crop=24)(frames)
    assert three.shape == (9, 3, 4, 24, 24)


def test_predict_averages_the_scores_of_the_views(files):
    model = nlnet.load_model(files["ckpt"])
    views = nlnet.preprocessing(files["ckpt"])(files["video"])
    with torch.no_grad():
        expected = torch.softmax(model(views), dim=1).double().mean(0)
    frames = read_frames(files["video"], range(11))
    by_path, by_tensor = nlnet.predict(files["ckpt"], [files["video"], frames], batch_size=2)
    assert isinstance(by_path, Prediction) and by_path.video == str(files["video"])
    assert by_tensor.video is None and by_path.views == 3
    torch.testing.assert_close(by_path.scores, expected)
    torch.testing.assert_close(by_tensor.scores, expected)
    top = by_path.top(3)
    assert [n for n, _ in top] == [NAMES[i] for i in expected.argsort(descending=True)]
    assert by_path.label == top[0][0]
    assert abs(sum(s for _, s in top) - 1) < 1e-6
    [same] = nlnet.predict(model, files["video"])  # a single video, a loaded model
    torch.testing.assert_close(same.scores, expected)


def test_predict_with_any_module_needs_a_transform(files):
    net = nlnet.create_model("c2d_tiny", num_classes=2, width=4).eval()
    with pytest.raises(ValueError, match="transform"):
        nlnet.predict(net, [files["video"]])
    transform = VideoTransform(num_frames=4, size=16, clips=1)
    [r] = nlnet.predict(net, [files["video"]], transform=transform)
    assert r.class_names == ["class_0", "class_1"] and r.views == 1


def test_bad_inputs_are_clear_errors(files):
    with pytest.raises(DataError, match="broken.mp4"):
        nlnet.predict(files["ckpt"], [files["broken"]])
    bad, good = nlnet.predict(files["ckpt"], [files["broken"], files["video"]], skip_errors=True)
    assert bad.scores is None and bad.error and good.error is None
    with pytest.raises(ValueError, match="video: expected .* uint8"):
        nlnet.preprocessing(files["ckpt"])(torch.zeros(4, 8, 8, 3))
    with pytest.raises(ValueError, match="clips: expected a positive integer"):
        VideoTransform(num_frames=4, clips=0)
    with pytest.raises(ValueError, match="batch_size"):
        nlnet.predict(files["ckpt"], [files["video"]], batch_size=0)
    bare = files["ckpt"].parent / "bare.pt"
    torch.save(files["model"].state_dict(), bare)
    with pytest.raises(CheckpointError, match="no model name"):
        nlnet.preprocessing(bare)
    no_prep = save_checkpoint(files["ckpt"].parent / "noprep.pt", model=files["model"],
                              model_name="c2d_tiny_nl1", num_classes=3,
                              model_options={"width": 4})  # fmt: skip
    with pytest.raises(CheckpointError, match="preprocessing stores none"):
        nlnet.preprocessing(no_prep)
    assert nlnet.load_model(no_prep).nlnet_transform is None
    with pytest.raises(ValueError, match="transform"):
        nlnet.predict(no_prep, [files["video"]])


def test_video_transform_takes_numpy_frames(files):
    """The docs' promise: uint8 (T, H, W, C) numpy frames work as the tensor does."""
    transform = nlnet.preprocessing(files["ckpt"])
    frames = read_frames(files["video"], range(11))
    assert torch.equal(transform(frames.numpy()), transform(frames))
    [by_array] = nlnet.predict(files["ckpt"], frames.numpy())
    [by_path] = nlnet.predict(files["ckpt"], files["video"])
    torch.testing.assert_close(by_array.scores, by_path.scores)
    with pytest.raises(ValueError, match="uint8"):
        transform(frames.numpy().astype("float32"))
    with pytest.raises(ValueError, match=r"\(11, 3, 32, 40\) \(channels first\? permute"):
        transform(frames.permute(0, 3, 1, 2).contiguous())  # torchvision's TCHW
    with pytest.raises(ValueError, match=r"expected frames \(frames, H, W, 3\), got shape"):
        transform(torch.cat([frames, frames[..., :1]], -1))  # RGBA


def test_short_video_and_still_image_warn_naming_the_file(files, tmp_path):
    from PIL import Image

    from nlnet.inference import InputWarning

    short = write_video(tmp_path / "short.mp4", torch.zeros(3, 32, 40, 3, dtype=torch.uint8))
    with pytest.warns(InputWarning, match=r"short\.mp4.*3 frame"):
        [r] = nlnet.predict(files["ckpt"], short)  # 4 frames at stride 2 span 7
    assert r.scores is not None
    still = tmp_path / "photo.png"
    Image.fromarray(torch.zeros(32, 40, 3, dtype=torch.uint8).numpy()).save(still)
    with pytest.warns(InputWarning, match=r"photo\.png.*still image"):
        [r] = nlnet.predict(files["ckpt"], still)
    assert r.scores is not None and r.views == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a long enough video: no warning
        nlnet.predict(files["ckpt"], files["video"])


def test_an_animated_gif_is_scored_as_the_video_of_its_frames(files, tmp_path):
    """An animated GIF given to a video model is its frames (not a still of the first one);
    a one-frame GIF is a still image."""
    from PIL import Image

    from nlnet.inference import InputWarning

    gen = torch.Generator().manual_seed(2)
    frames = torch.randint(0, 256, (9, 32, 40, 3), dtype=torch.uint8, generator=gen)
    frames[..., 1:] = frames[..., :1]  # grey: the GIF palette keeps the pixels exactly
    images = [Image.fromarray(f.numpy()) for f in frames]
    gif = tmp_path / "moving.gif"
    images[0].save(gif, save_all=True, append_images=images[1:], duration=40, loop=0)
    transform = nlnet.preprocessing(files["ckpt"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not a still image
        views = transform(gif)
    assert torch.equal(views, transform(frames))
    images[0].save(tmp_path / "still.gif")
    with pytest.warns(InputWarning, match=r"still\.gif.*still image"):
        transform(tmp_path / "still.gif")


@pytest.fixture(scope="module")
def image_files(tmp_path_factory):
    from PIL import Image

    tmp = tmp_path_factory.mktemp("image_inference")
    torch.manual_seed(0)
    model = nlnet.create_model("vit_tiny", num_classes=2, image_size=32)
    prep = {"mean": [0.5] * 3, "std": [0.25] * 3, "size": 32, "resize": 36,
            "input_kind": "image"}  # fmt: skip
    ckpt = save_checkpoint(
        tmp / "image.pt", model=model, model_name="vit_tiny", num_classes=2,
        class_names=["dark", "light"], model_options={"image_size": 32}, preprocessing=prep,
    )  # fmt: skip
    gen = torch.Generator().manual_seed(2)
    paths = []
    for i in range(2):
        x = torch.randint(0, 256, (40, 48, 3), dtype=torch.uint8, generator=gen)
        Image.fromarray(x.numpy()).save(tmp / f"{i}.png")
        paths.append(tmp / f"{i}.png")
    return {"ckpt": ckpt, "paths": paths, "model": model.eval()}


def test_image_checkpoints_through_the_python_api(image_files):
    """``nlnet.preprocessing``/``nlnet.predict`` take an image classifier's checkpoint: the
    image task's test transform (resize 36, centre crop 32, the stored mean/std)."""
    from PIL import Image
    from torchvision import transforms as T

    from nlnet.inference import ImageTransform

    transform = nlnet.preprocessing(image_files["ckpt"])
    assert transform == ImageTransform(size=36, crop=32, mean=(0.5,) * 3, std=(0.25,) * 3)
    for views in ({"clips": 3}, {"crops": 3}):  # a clip's views: refused, not ignored
        with pytest.raises(ValueError, match=f"{next(iter(views))}: views of a video clip"):
            nlnet.preprocessing(image_files["ckpt"], **views)
    ref = T.Compose([T.Resize(36), T.CenterCrop(32), T.ToTensor(), T.Normalize([0.5] * 3,
                                                                                 [0.25] * 3)])  # fmt: skip
    path = image_files["paths"][0]
    expected_input = ref(Image.open(path).convert("RGB"))[None]
    assert torch.equal(transform(path), expected_input)
    results = nlnet.predict(image_files["ckpt"], image_files["paths"])
    with torch.no_grad():
        expected = torch.softmax(image_files["model"](expected_input), 1)[0].double()
    torch.testing.assert_close(results[0].scores, expected)
    assert results[0].class_names == ["dark", "light"] and results[0].views == 1
    assert nlnet.load_model(image_files["ckpt"]).nlnet_transform == transform


def test_loading_into_another_network_names_the_keys_at_fault(files):
    """``load_model(path, model=...)`` with a network that is not the checkpoint's: the keys
    missing, unexpected or of another shape are named (not PyTorch's cut-off first line)."""
    from nlnet.engine.checkpoint import CheckpointMismatchError

    other = nlnet.create_model("c2d_tiny_nl1", num_classes=5, width=4)  # another classifier
    with pytest.raises(CheckpointMismatchError, match=r"size mismatch for fc.weight: .*"
                                                      r"torch.Size\(\[3, 32\]\).*load_backbone"):  # fmt: skip
        nlnet.load_model(files["ckpt"], model=other)
    with pytest.raises(CheckpointMismatchError, match=r"Missing key\(s\) in state_dict: "
                                                      r"\"weight\", \"bias\".; Unexpected"):  # fmt: skip
        nlnet.load_model(files["ckpt"], model=torch.nn.Linear(2, 2))
