"""Checks of arguments that several commands share, each a one-line :class:`UserError`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["data_backend_arg", "device_arg", "expand_inputs", "output_dir_arg"]


def device_arg(value: str | None, flag: str = "--device") -> Any:
    """The ``torch.device`` of a ``--device`` value (``auto``, ``cpu``, ``cuda``, ``cuda:N``).

    Raises:
        UserError: an unknown device, or CUDA asked for on a machine without it.
    """
    from nlnet.engine.distributed import resolve_device
    from nlnet.engine.errors import UserError

    try:
        return resolve_device(value)
    except (ValueError, RuntimeError) as exc:
        text = str(exc).split(": ", 1)[-1]
        raise UserError(f"{flag}: {text} (use --device cpu)") from None


def output_dir_arg(value: str | Path, flag: str = "--output-dir") -> Path:
    """A folder to write into: refused in one line when the path is an existing file.

    Raises:
        UserError: ``value`` names an existing file (or lies under one).
    """
    from nlnet.engine.errors import UserError

    path = Path(value)
    for part in (path, *path.parents):
        if part.exists() and not part.is_dir():
            raise UserError(
                f"{flag}: {str(value)!r} is not a folder ({str(part)!r} is an existing file); "
                "give a folder path"
            )
    return path


def data_backend_arg(cfg: Any) -> None:
    """Refuse in one line a config whose ``data.backend`` is a decoder that does not work here
    (``torchcodec`` not installed or without FFmpeg's shared libraries).

    Raises:
        UserError: naming ``data.backend``, why torchcodec cannot be used and what to do.
    """
    from nlnet.engine.errors import UserError

    if getattr(getattr(cfg, "data", None), "backend", None) != "torchcodec":
        return
    from nlnet.data.video_io.backends import torchcodec_unavailable_reason

    reason = torchcodec_unavailable_reason()
    if reason is not None:
        raise UserError(
            f"data.backend=torchcodec: torchcodec cannot be used here ({reason}); "
            "pip install torchcodec (it needs FFmpeg's shared libraries) or set data.backend=pyav"
        )


def expand_inputs(
    paths: list[str], kinds: tuple[str, ...] | None = None, what: str = "video or image"
) -> list[str]:
    """Files as given; a folder: every file under it (recursively, sorted) whose name ends with
    one of ``kinds`` (default: the video and image extensions). A folder with none is one line
    naming it (``what``: the kind of file it lacks)."""
    from pathlib import Path

    from nlnet.data.class_folders import media_files
    from nlnet.data.video.config import VIDEO_EXTENSIONS
    from nlnet.engine.errors import UserError
    from nlnet.inference import IMAGE_EXTENSIONS

    kinds = kinds or VIDEO_EXTENSIONS + IMAGE_EXTENSIONS
    out: list[str] = []
    for text in paths:
        path = Path(text)
        if not path.exists():
            raise UserError(f"VIDEO: no such file or folder {text!r}")
        if not path.is_dir():
            out.append(text)
            continue
        found = [str(p) for p in media_files(path, kinds)]
        if not found:
            raise UserError(f"VIDEO: the folder {text!r} holds no {what} file")
        out += found
    return out
