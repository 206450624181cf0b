"""Decoding backends of nlnet.data.video_io.backends on small real mp4 files written with PyAV."""

from __future__ import annotations

import os

import av
import numpy as np
import pytest
import torch

from nlnet.data.video_io import backends as video_mod
from nlnet.data.video_io.backends import (
    VideoDecodeError,
    available_backends,
    open_video,
    probe_video,
    read_frames,
    resolve_backend,
    torchcodec_available,
    torchcodec_unavailable_reason,
    write_video,
)

NUM_FRAMES, H, W = 30, 32, 40
BACKENDS = ["pyav", "torchcodec"]


def level(i: int) -> int:
    return 20 + 6 * i  # grey level that identifies frame i


def flat_frames(n: int = NUM_FRAMES) -> np.ndarray:
    """Frame i is flat with red = level(i): the decoded mean tells which frame it is."""
    frames = np.zeros((n, H, W, 3), np.uint8)
    for i in range(n):
        frames[i, ..., 0] = level(i)
        frames[i, ..., 1] = 255 - level(i)
        frames[i, ..., 2] = 128
    return frames


def textured_frames(n: int = NUM_FRAMES) -> np.ndarray:
    """Moving texture, so that P- and B-frames really depend on their references."""
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, size=(H, 2 * W, 3), dtype=np.uint8)
    return np.stack([np.roll(base, 3 * i, axis=1)[:, :W] for i in range(n)])


def frame_ids(frames: torch.Tensor) -> list[int]:
    red = frames[..., 0].float().mean(dim=(1, 2))  # (T,)
    return [int(round((r - 20) / 6)) for r in red.tolist()]


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    d = tmp_path_factory.mktemp("video_io")
    return {
        "flat": write_video(d / "flat.mp4", flat_frames(), fps=25),
        # short GOP + B-frames: seeking lands on several keyframes, output order != decode order
        "h264": write_video(d / "h264.mp4", textured_frames(), fps=25, gop_size=6, bframes=2),
        "mpeg4": write_video(
            d / "mpeg4.mp4", textured_frames(), fps=30, codec="mpeg4", gop_size=7, bframes=2
        ),
        "dir": d,
    }


def sequential_decode(path) -> torch.Tensor:
    """Reference: every frame by a plain forward decode of the whole file, no seeking."""
    with av.open(str(path)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    return torch.from_numpy(np.stack(frames))


@pytest.mark.parametrize("backend", BACKENDS)
def test_probe_and_frame_identity(videos, backend, require_torchcodec):
    if backend == "torchcodec":
        require_torchcodec()
    info = probe_video(videos["flat"], backend=backend)
    assert (info.num_frames, info.height, info.width) == (NUM_FRAMES, H, W)
    assert info.fps == pytest.approx(25.0)
    with open_video(videos["flat"], backend=backend) as reader:
        assert reader.num_frames == NUM_FRAMES
        out = reader.get_frames([7, 3, 3, 29, 0])  # any order, repeats
        assert out.dtype == torch.uint8 and out.shape == (5, H, W, 3)
        assert frame_ids(out) == [7, 3, 3, 29, 0]
        assert frame_ids(reader.get_range(4, 20, 5)) == [4, 9, 14, 19]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("codec", ["h264", "mpeg4"])
def test_seek_equals_sequential_decode(videos, backend, codec, require_torchcodec):
    if backend == "torchcodec":
        require_torchcodec()
    path = videos[codec]
    reference = sequential_decode(path)  # (N, H, W, 3)
    assert reference.shape[0] == NUM_FRAMES
    with open_video(path, backend=backend) as reader:
        assert reader.num_frames == NUM_FRAMES
        # clips that start after a keyframe, span GOP boundaries, end at the last frame
        for idx in ([13, 15, 17, 19], [5, 6], [29], [22, 24, 26, 28], [0, 29], [20, 8, 11]):
            assert torch.equal(reader.get_frames(idx), reference[idx]), idx
        # a second request on the same reader (seeking backwards) is still exact
        assert torch.equal(reader.get_frames([1, 2]), reference[[1, 2]])


def test_backends_give_the_same_frames(videos, require_torchcodec):
    require_torchcodec()
    for name in ("flat", "h264", "mpeg4"):
        idx = [0, 5, 6, 17, 29]
        a = read_frames(videos[name], idx, backend="pyav")
        b = read_frames(videos[name], idx, backend="torchcodec")
        assert a.shape == b.shape
        # different FFmpeg builds may round the YUV->RGB conversion differently
        assert (a.int() - b.int()).abs().max().item() <= 2, name
        assert probe_video(videos[name], "pyav") == probe_video(videos[name], "torchcodec")
        if name == "flat":
            assert frame_ids(a) == frame_ids(b) == idx


@pytest.mark.parametrize("backend", BACKENDS)
def test_corrupt_files_raise_decode_error_naming_the_path(videos, backend, require_torchcodec):
    if backend == "torchcodec":
        require_torchcodec()
    d = videos["dir"]
    garbage = d / "garbage.mp4"
    garbage.write_bytes(np.random.default_rng(1).integers(0, 256, 4000, dtype=np.uint8).tobytes())
    data = videos["h264"].read_bytes()
    truncated = d / "truncated.mp4"  # moov atom written at the end: cut off
    truncated.write_bytes(data[: len(data) // 2])
    empty = d / "empty.mp4"
    empty.write_bytes(b"")
    for path in (garbage, truncated, empty, d / "missing.mp4"):
        with pytest.raises(VideoDecodeError) as err:
            open_video(path, backend=backend)
        assert str(path) in str(err.value) and err.value.path == str(path)


def test_index_and_argument_errors(videos):
    with open_video(videos["flat"]) as reader:
        with pytest.raises(IndexError, match="frame indices"):
            reader.get_frames([0, NUM_FRAMES])
        with pytest.raises(ValueError, match="empty"):
            reader.get_frames([])
        with pytest.raises(ValueError, match="step"):
            reader.get_range(0, 4, 0)
    with pytest.raises(ValueError, match="backend"):
        open_video(videos["flat"], backend="decord")
    with pytest.raises(ValueError, match="shape"):
        write_video(videos["dir"] / "x.mp4", np.zeros((2, 8, 8), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        write_video(videos["dir"] / "x.mp4", np.zeros((2, 8, 8, 3), np.float32))
    with pytest.raises(ValueError, match="even"):
        write_video(videos["dir"] / "x.mp4", np.zeros((2, 7, 8, 3), np.uint8))


def test_torchcodec_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(video_mod, "_torchcodec_import_error", lambda: "ImportError: nope")
    assert available_backends() == ["pyav"]
    assert resolve_backend("auto") == "pyav"
    with pytest.raises(RuntimeError, match="torchcodec"):
        resolve_backend("torchcodec")


def test_write_video_accepts_tensors_and_near_lossless(tmp_path):
    frames = torch.from_numpy(textured_frames(6))
    path = write_video(tmp_path / "sub" / "t.mp4", frames, fps=10, crf=0, pix_fmt="yuv444p")
    back = read_frames(path, range(6))
    # crf=0 4:4:4 leaves only the RGB <-> YUV rounding
    assert (back.int() - frames.int()).abs().float().mean().item() < 3.0


def test_torchcodec_without_ffmpeg_libraries_counts_as_unavailable(monkeypatch):
    import sys
    import types

    fake = types.ModuleType("torchcodec")
    fake.ffmpeg_major_version = None  # what torchcodec reports when FFmpeg cannot be loaded
    decoders = types.ModuleType("torchcodec.decoders")
    decoders.VideoDecoder = object
    fake.decoders = decoders
    monkeypatch.setitem(sys.modules, "torchcodec", fake)
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", decoders)
    video_mod._torchcodec_import_error.cache_clear()
    try:
        assert not torchcodec_available()
        assert "FFmpeg" in torchcodec_unavailable_reason()
        assert resolve_backend("auto") == "pyav"
    finally:
        video_mod._torchcodec_import_error.cache_clear()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("container,codec", [(".avi", "mpeg4"), (".mkv", "libx264")])
def test_other_containers_seek_exactly(tmp_path, backend, container, codec, require_torchcodec):
    if backend == "torchcodec":
        require_torchcodec()
    # UCF101/HMDB51 ship MPEG-4 in AVI; torchcodec mis-indexes AVI with packed B-frames, so the
    # AVI file here has none (PyAV handles B-frames in AVI too: see the next test)
    path = write_video(
        tmp_path / f"v{container}", textured_frames(20), fps=25, codec=codec, gop_size=5,
        bframes=0 if container == ".avi" else 2,
    )  # fmt: skip
    reference = sequential_decode(path)
    with open_video(path, backend=backend) as reader:
        assert reader.num_frames == 20
        for idx in ([3, 5, 7], [11, 12], [19], [16, 0]):
            assert torch.equal(reader.get_frames(idx), reference[idx]), idx


def test_pyav_seeks_exactly_in_avi_with_b_frames(tmp_path):
    path = write_video(
        tmp_path / "b.avi", textured_frames(20), fps=25, codec="mpeg4", gop_size=5, bframes=2
    )
    reference = sequential_decode(path)
    with open_video(path, backend="pyav") as reader:
        assert reader.num_frames == 20
        for idx in ([3, 5, 7], [11, 12], [19], [16, 0]):
            assert torch.equal(reader.get_frames(idx), reference[idx]), idx


def test_pyav_reads_streams_without_timestamps(tmp_path):
    # a raw H.264 elementary stream has no timestamps and cannot seek: indexed by decoding
    path = tmp_path / "raw.h264"
    with av.open(str(path), "w", format="h264") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        for array in flat_frames(12):
            for packet in stream.encode(av.VideoFrame.from_ndarray(array, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    with open_video(path, backend="pyav") as reader:
        assert reader.num_frames == 12
        assert frame_ids(reader.get_frames([5, 2, 11])) == [5, 2, 11]
        assert frame_ids(reader.get_frames([0, 1])) == [0, 1]


@pytest.mark.parametrize(
    "codec, pix_fmt, crf",
    [("libx264", "yuv420p", None), ("libx264", "yuv444p", 0), ("mpeg4", "yuv420p", None)],
)
def test_write_video_equals_plain_pyav_encoding(tmp_path, codec, pix_fmt, crf):
    """The fast path (one kept pixel-format converter per thread) writes the bytes of the plain
    path (a fresh converter for every frame), and decoding through the kept converter gives the
    frames of a fresh conversion of each decoded frame. Both sides convert on one thread: PyAV's
    own conversion inside ``encode`` / ``to_ndarray`` lets FFmpeg pick slice threads, and its bytes
    changed from run to run under load (1 run in 15 after tests/test_docs.py; this comparison:
    none in 24)."""
    from fractions import Fraction

    rng = np.random.default_rng(0)
    options = {"crf": str(crf)} if crf is not None else {}
    for i, (t, h, w) in enumerate(((3, 16, 24), (2, 32, 32), (3, 16, 24))):  # sizes change
        frames = rng.integers(0, 256, (t, h, w, 3), dtype=np.uint8)
        fast = write_video(tmp_path / f"fast{i}.mp4", frames, fps=8, codec=codec, crf=crf,
                           pix_fmt=pix_fmt)  # fmt: skip
        plain = tmp_path / f"plain{i}.mp4"
        with av.open(str(plain), mode="w") as container:
            stream = container.add_stream(codec, rate=Fraction(8), options=options)
            stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
            for array in frames:
                frame = av.VideoFrame.from_ndarray(array, format="rgb24")
                frame = frame.reformat(format=pix_fmt, threads=1)  # a new context every frame
                for packet in stream.encode(frame):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        assert fast.read_bytes() == plain.read_bytes()
        with av.open(str(plain)) as container:
            ref = np.stack([f.reformat(format="rgb24", threads=1).to_ndarray()
                            for f in container.decode(video=0)])  # fmt: skip
        with open_video(fast, backend="pyav") as reader:
            assert np.array_equal(reader.get_frames(list(range(t))).numpy(), ref)


def _read_in_child(path, queue) -> None:
    with open_video(path, backend="pyav") as reader:
        queue.put(reader.get_frames([0, 1]).shape[0])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork start method only")
def test_a_forked_worker_reads_after_its_parent_did(videos):
    """The kept pixel-format converter converts on one thread: a forked data-loader worker that
    inherits its parent's converter reads frames (with FFmpeg's slice threads it waited forever
    on threads that did not survive the fork)."""
    import multiprocessing as mp

    path = videos["h264"]
    with open_video(path, backend="pyav") as reader:
        reader.get_frames([0])  # the parent's converter now exists
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(path, queue))
    child.start()
    child.join(timeout=60)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked reader hung")
    assert queue.get(timeout=5) == 2


def _encode(path, frames, rotation: int = 0, pts=None) -> None:
    """``frames`` (T, H, W, 3) uint8 as H.264 with a display rotation (counter-clockwise
    degrees) and optional millisecond timestamps."""
    from fractions import Fraction

    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=25)
        s.height, s.width, s.pix_fmt = frames.shape[1], frames.shape[2], "yuv444p"
        s.options = {"crf": "0"}
        if rotation:
            s.set_display_rotation(rotation)
        for i, a in enumerate(frames):
            f = av.VideoFrame.from_ndarray(a, format="rgb24")
            if pts is not None:
                f.pts, f.time_base = pts[i], Fraction(1, 1000)
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rotation, turns", [(90, 1), (-90, 3), (180, 2)])
def test_a_phone_video_is_turned_as_a_player_shows_it(tmp_path, backend, rotation, turns,
                                                      require_torchcodec):  # fmt: skip
    """A portrait phone video is stored landscape with a display rotation: the frames come
    turned by it (counter-clockwise, FFmpeg's convention, as torchcodec 0.11 on turns them)."""
    if backend == "torchcodec":
        require_torchcodec()
    frames = np.full((4, 32, 48, 3), 20, np.uint8)
    frames[:, :16, :24, 0] = 250  # a red block at the top left of the stored frame
    _encode(tmp_path / "phone.mp4", frames, rotation)
    got = read_frames(tmp_path / "phone.mp4", [0, 3], backend=backend).numpy()
    expected = np.rot90(frames[[0, 3]], turns, axes=(1, 2))
    assert got.shape == expected.shape
    assert np.abs(got.astype(int) - expected).max() <= 8  # lossless up to colour conversion


def test_repeated_timestamps_keep_every_frame_in_order(tmp_path):
    """Millisecond timestamps into a 1/25 encoder round some frames to one pts: every frame is
    still read once, in decoding order (frames keyed by pts would overwrite each other)."""
    frames = np.stack([np.full((32, 32, 3), 20 * i + 10, np.uint8) for i in range(8)])
    _encode(tmp_path / "dup.mkv", frames, pts=[0, 10, 20, 200, 210, 220, 600, 610])
    with open_video(tmp_path / "dup.mkv") as r:
        got = r.get_frames(list(range(r.num_frames)))[:, 0, 0, 0].tolist()
    assert np.allclose(got, [20 * i + 10 for i in range(8)], atol=3)


@pytest.mark.parametrize("container", ["mp4", "mkv"])
def test_a_stream_cut_mid_gop_starts_at_its_first_decodable_frame(tmp_path, container):
    """A stream copied from the middle of a GOP (a cut without re-encoding) starts with frames
    whose keyframe it lacks: they never decode. The video is indexed from the first frame that
    does, and reads as a plain decode reads it (before, every clip that touched the start
    failed and the whole video was skipped)."""
    full = write_video(tmp_path / "gop8.mp4", textured_frames(40), fps=8, gop_size=8, bframes=0)
    cut = tmp_path / f"cut.{container}"
    with av.open(str(full)) as src, av.open(str(cut), "w") as dst:
        ins = src.streams.video[0]
        out = dst.add_stream_from_template(ins)
        for i, packet in enumerate(src.demux(ins)):
            if packet.dts is None or i < 3:  # the flush packet; the cut
                continue
            packet.stream = out
            dst.mux(packet)
    expected = sequential_decode(cut)
    assert len(expected) < 37  # some frames of the cut GOP do not decode
    with open_video(cut) as reader:
        assert reader.num_frames == len(expected)
        assert torch.equal(reader.get_frames(list(range(reader.num_frames))), expected)
        assert torch.equal(reader.get_frames([0, 20]), expected[[0, 20]])


def test_a_phone_video_is_predicted_as_its_upright_twin(tmp_path):
    """The user's path: ``nlnet.predict`` on a portrait phone video (stored landscape with a
    display rotation) gives the scores of the same video stored upright."""
    import nlnet
    from nlnet.data.preprocessing import Preprocessing
    from nlnet.inference import VideoTransform

    upright = textured_frames(8)[:, :, :32]  # (T, 48, 32, 3): portrait
    _encode(tmp_path / "upright.mp4", np.ascontiguousarray(upright))
    _encode(tmp_path / "phone.mp4", np.ascontiguousarray(np.rot90(upright, -1, axes=(1, 2))), 90)
    prep = Preprocessing("clip", (0.45,) * 3, (0.225,) * 3, num_frames=4, stride=2, size=32,
                         crop=32)  # fmt: skip
    transform = VideoTransform.from_preprocessing(prep, clips=2, crops=1)
    torch.manual_seed(0)
    model = nlnet.create_model("c2d_tiny_nl1", num_classes=3, width=4).eval()
    a, b = nlnet.predict(model, [tmp_path / "upright.mp4", tmp_path / "phone.mp4"],
                         transform=transform)  # fmt: skip
    torch.testing.assert_close(b.scores, a.scores, atol=1e-3, rtol=0)
    assert not torch.allclose(
        transform(tmp_path / "phone.mp4"), transform(np.rot90(upright, -1, axes=(1, 2)).copy())
    )  # the stored (sideways) frames would give other views
