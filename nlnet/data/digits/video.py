"""The built-in long-range video task: real handwritten digits, related across distant frames.

Clips are made from scikit-learn's handwritten digits (``load_digits``: 1797 real 8x8 scans that
ship with scikit-learn, so nothing is downloaded), upscaled to ``digit_size`` pixels and placed
at random positions on a black ``size x size`` canvas with Gaussian noise. Three tasks, each
asking about a relation between content at unrelated positions in the first and the last frame:

* ``"same"`` (default, 2 classes): frame 0 shows the **cue**, a white digit inside a thin white
  box; the last frame shows one digit in a random colour. Target: does the last digit have the
  cue's class? (Different scans of the digit, never the same image.)
* ``"pointer"`` (``len(digits)`` classes): frame 0 shows a coloured square; the last frame shows
  ``num_choices`` digits of distinct classes in distinct colours. Target: the class of the digit
  drawn in the square's colour.
* ``"match"`` (``num_choices`` classes): frame 0 shows a boxed white cue digit; the last frame
  ``num_choices`` coloured digits of distinct classes, one of the cue's class (or, with
  ``match="image"``, the cue's very scan). Target: the colour of that digit.
* ``"order"`` (2 classes; the order control of ``nlnet demo --task order``): the frames of a
  ``"same"``-style clip (boxed cue, one coloured digit of any class), played forwards (label 0:
  the cue comes first) or backwards (label 1: the cue comes last). The two classes hold the same
  frames in reversed order, so a model whose logits do not change when the frames are permuted
  -- C2D, and C2D + non-local blocks without position information (Eq. 1 is a weighted sum over
  all positions, blind to their order) -- is at chance *in principle*; a model that sees time
  (temporal kernels, temporal strides, or position information) can solve it.

Frames in between (and frame 0) can hold ``distractors`` white digits without a box.

Why a C2D network cannot solve these ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Table 1, without temporal
mixing): C2D runs the same 2D network on every frame, and with global average pooling and a
linear classifier its logits are a *sum* of per-frame terms, ``l_k = u_k(frame 0) + v_k(last
frame) + ...``. All three targets are non-additive functions of what the two frames show. For
``"same"`` (balanced, ``n = len(digits)`` equally likely classes) the best any sum can do is to
answer "same" exactly when both digits fall in a chosen subset of ``m`` classes, which is right
with probability ``(m/n + 1 - m(m-1)/(n(n-1))) / 2``: 66.7% for ``n = 4``, 63.9% for ``n = 10``
(chance is 50%; a network also has to *find* that trick). A spacetime non-local block
(Sec. 3, Eq. 1; Figure 1) lets the cue's position attend to the last-frame digit directly.

Generation is deterministic from ``seed``; the 1797 digit images are split by index into
disjoint, class-stratified train/val/test pools *before* any clip is drawn, so test clips only
contain digit images never seen in training. Labels are balanced (counts differ by at most one).
:func:`nlnet.data.digits.cache.prepare_digits` writes the clips as mp4 files that the normal
data pipeline reads back.
:func:`generate_frames` draws single-digit frames for 2D pre-training.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "COLOR_NAMES",
    "DigitsTaskConfig",
    "DigitsTaskSplit",
    "draw_digit",
    "generate_frames",
    "generate_split",
    "load_digit_bank",
    "place_squares",
    "split_digit_indices",
]

SPLITS: tuple[str, ...] = ("train", "val", "test")
TASKS: tuple[str, ...] = ("pointer", "match", "same", "order")
GENERATOR_VERSION = 2

#: Colour names (the class names on disk) and their RGB values in [0, 1].
COLOR_NAMES: tuple[str, ...] = ("red", "green", "blue", "yellow", "magenta", "cyan")
_COLORS = np.array(
    [
        [1.00, 0.15, 0.15],
        [0.15, 1.00, 0.15],
        [0.30, 0.40, 1.00],
        [1.00, 0.95, 0.10],
        [1.00, 0.20, 1.00],
        [0.10, 1.00, 1.00],
    ],
    dtype=np.float32,
)


@dataclasses.dataclass(frozen=True)
class DigitsTaskConfig:
    """Size and difficulty of the digits task (all clips of a split share it).

    Attributes:
        num_frames: frames per clip T (>= 2; the cue is in frame 0, the choices in frame T-1).
        size: frame height and width in pixels.
        digit_size: side of a rendered digit (the 8x8 scans are upscaled bilinearly).
        task: ``"same"``, ``"pointer"``, ``"match"`` or ``"order"`` (see the module docstring).
        digits: the digit classes used (fewer classes: an easier recognition problem).
        num_choices: coloured digits in the last frame for ``pointer``/``match`` (2..6).
        distractors: unboxed white digits in every frame but the last (0 = none).
        noise: standard deviation of the Gaussian pixel noise (intensities in [0, 1]).
        match: ``"class"``: the matching last-frame digit is another scan of the cue's class;
            ``"image"``: it is the cue's own scan (the cue reappears, recoloured, elsewhere).
        num_train, num_val, num_test: clips per split.
        split_fractions: fractions of the 1797 digit images given to train/val/test.
        seed: the seed every random choice derives from.
    """

    num_frames: int = 4
    size: int = 32
    digit_size: int = 12
    task: str = "same"
    digits: tuple[int, ...] = (0, 1, 2, 3)
    num_choices: int = 4
    distractors: int = 0
    noise: float = 0.05
    match: str = "class"
    num_train: int = 6000
    num_val: int = 300
    num_test: int = 600
    split_fractions: tuple[float, float, float] = (0.6, 0.15, 0.25)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_frames < 2:
            raise ValueError(f"num_frames must be >= 2 (cue + choices), got {self.num_frames}")
        if not 2 <= self.num_choices <= len(COLOR_NAMES):
            raise ValueError(
                f"num_choices must be in [2, {len(COLOR_NAMES)}], got {self.num_choices}"
            )
        if self.digit_size < 4:
            raise ValueError(f"digit_size must be >= 4 pixels, got {self.digit_size}")
        if self.distractors < 0:
            raise ValueError(f"distractors must be >= 0, got {self.distractors}")
        digits = tuple(int(d) for d in self.digits)
        if len(set(digits)) != len(digits) or not all(0 <= d <= 9 for d in digits):
            raise ValueError(f"digits must be distinct digit classes 0..9, got {self.digits!r}")
        object.__setattr__(self, "digits", digits)
        if len(digits) < 2:
            raise ValueError(f"digits must hold at least 2 classes, got {digits}")
        if self.task not in ("same", "order") and self.num_choices > len(digits):
            raise ValueError(
                f"num_choices={self.num_choices} needs at least as many digit classes, "
                f"got digits={digits}"
            )
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if self.match not in ("class", "image"):
            raise ValueError(f"match must be 'class' or 'image', got {self.match!r}")
        if self.noise < 0:
            raise ValueError(f"noise must be >= 0, got {self.noise}")
        for name in ("num_train", "num_val", "num_test"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        fr = tuple(float(f) for f in self.split_fractions)
        if len(fr) != 3 or min(fr) <= 0 or abs(sum(fr) - 1.0) > 1e-6:
            raise ValueError(
                f"split_fractions must be three positive numbers summing to 1, got {fr}"
            )
        # The last frame must hold num_choices boxes side by side; the first the cue plus
        # the distractors. A footprint is the digit plus a one-pixel box and a gap.
        foot = self.footprint
        per_side = self.size // foot
        choices = 1 if self.task in ("same", "order") else self.num_choices
        if per_side * per_side < max(choices, 1 + self.distractors):
            raise ValueError(
                f"size={self.size} is too small for {self.num_choices} choices / "
                f"{1 + self.distractors} digits of digit_size={self.digit_size} per frame"
            )

    @property
    def footprint(self) -> int:
        """Side of the square a digit occupies (digit, its optional box, a 1-pixel gap)."""
        return self.digit_size + 3

    @property
    def marker_size(self) -> int:
        """Side of the pointer task's coloured square."""
        return max(3, (2 * self.digit_size) // 3)

    @property
    def num_classes(self) -> int:
        """``len(digits)`` digit classes (pointer), ``num_choices`` colours (match), 2 (same)."""
        if self.task in ("same", "order"):
            return 2
        return len(self.digits) if self.task == "pointer" else self.num_choices

    @property
    def class_names(self) -> list[str]:
        """Target class names, sorted like the labels (the class-per-folder reader numbers the
        folders alphabetically): ``"0"``..``"9"`` or ``"<k>_<colour>"``."""
        if self.task == "pointer":
            return [str(d) for d in self.digits]
        if self.task == "same":
            return ["0_different", "1_same"]
        if self.task == "order":
            return ["0_cue_first", "1_cue_last"]
        return [f"{k}_{name}" for k, name in enumerate(COLOR_NAMES[: self.num_choices])]

    def split_size(self, split: str) -> int:
        """Number of clips of ``split`` ("train", "val" or "test")."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        return {"train": self.num_train, "val": self.num_val, "test": self.num_test}[split]

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["split_fractions"] = list(self.split_fractions)
        d["digits"] = list(self.digits)
        return d

    def fingerprint(self) -> str:
        """A short hash of everything that determines the generated files."""
        payload = json.dumps({"v": GENERATOR_VERSION, **self.to_dict()}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclasses.dataclass
class DigitsTaskSplit:
    """One generated split in memory.

    Attributes:
        clips: uint8 array (N, T, H, W, 3).
        labels: int64 array (N,), the colour index of the matching digit.
        cue: int64 (N,), the colour index of the marker (pointer task) or the digit class of
            the cue (match task).
        cue_box: int64 (N, 4), the cue digit's (y0, x0, y1, x1) in frame 0 (exclusive end).
        match_box: int64 (N, 4), the matching digit's box in the last frame.
        digit_ids: list of the sklearn digit indices used by each clip.
    """

    clips: np.ndarray
    labels: np.ndarray
    cue: np.ndarray
    cue_box: np.ndarray
    match_box: np.ndarray
    digit_ids: list[list[int]]


_BANK_CACHE: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def load_digit_bank(digit_size: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """The 1797 scikit-learn digits upscaled to ``digit_size`` (bilinear), intensities in [0, 1].

    Returns:
        ``(images, labels)``: float32 (1797, digit_size, digit_size) and int64 (1797,).
    """
    if digit_size in _BANK_CACHE:
        return _BANK_CACHE[digit_size]
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.from_numpy(digits.images.astype(np.float32) / 16.0)  # (1797, 8, 8)
    if digit_size != 8:
        images = F.interpolate(
            images[:, None], size=(digit_size, digit_size), mode="bilinear", align_corners=False
        )[:, 0]
    out = (images.clamp(0, 1).numpy(), digits.target.astype(np.int64))
    _BANK_CACHE[digit_size] = out
    return out


def split_digit_indices(
    labels: np.ndarray, fractions: Sequence[float] = (0.6, 0.15, 0.25), seed: int = 0
) -> dict[str, np.ndarray]:
    """Split the digit images by index into disjoint train/val/test pools, stratified by class.

    Args:
        labels: (N,) digit classes of the image bank.
        fractions: train/val/test fractions.
        seed: seed of the shuffle.

    Returns:
        ``{"train": idx, "val": idx, "test": idx}``, disjoint sorted int arrays covering all N.
    """
    rng = np.random.default_rng([seed, 7919])
    out: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}
    for cls in np.unique(labels):
        idx = np.flatnonzero(labels == cls)
        idx = idx[rng.permutation(len(idx))]
        n_train = int(round(fractions[0] * len(idx)))
        n_val = int(round(fractions[1] * len(idx)))
        out["train"].append(idx[:n_train])
        out["val"].append(idx[n_train : n_train + n_val])
        out["test"].append(idx[n_train + n_val :])
    return {s: np.sort(np.concatenate(v)) for s, v in out.items()}


def place_squares(rng: np.random.Generator, n: int, size: int, foot: int) -> list[tuple[int, int]]:
    """Top-left corners of ``n`` non-overlapping ``foot`` x ``foot`` squares in a frame.

    Args:
        rng: the generator drawing the corners.
        n: how many squares.
        size: side of the square frame.
        foot: side of a square (a digit and its one-pixel outline).

    Returns:
        ``n`` ``(y, x)`` corners: drawn at random without overlap, or after 50 failed tries on a
        jittered grid (which always fits, checked by :class:`DigitsTaskConfig`).
    """
    m = size - foot + 1  # possible corners per axis
    coords = np.arange(m)
    for _ in range(50):
        free = np.ones((m, m), dtype=bool)
        boxes: list[tuple[int, int]] = []
        for _ in range(n):
            cand = np.flatnonzero(free)
            if len(cand) == 0:
                break
            c = int(cand[rng.integers(len(cand))])
            y, x = divmod(c, m)
            boxes.append((y, x))
            # corners whose square would overlap this one
            ys = np.abs(coords - y) < foot
            xs = np.abs(coords - x) < foot
            free &= ~(ys[:, None] & xs[None, :])
        if len(boxes) == n:
            return boxes
    # Fall back to a jittered grid (always fits, checked in DigitsTaskConfig).
    per_side = size // foot
    cells = rng.permutation(per_side * per_side)[:n]
    slack = size - per_side * foot
    return [
        (
            int(c // per_side * foot + rng.integers(0, slack + 1)),
            int(c % per_side * foot + rng.integers(0, slack + 1)),
        )
        for c in cells
    ]


def draw_digit(
    frame: np.ndarray, img: np.ndarray, y: int, x: int, color: np.ndarray, box: bool
) -> tuple[int, int, int, int]:
    """Draw ``img`` (s, s) tinted by ``color`` with its top-left at (y+1, x+1); max-compose.

    Args:
        frame: ``(H, W, 3)`` float image, drawn on in place.
        img: ``(s, s)`` digit intensities in ``[0, 1]``.
        y: top of the digit's square (the outline's row).
        x: left of the digit's square (the outline's column).
        color: RGB tint in ``[0, 1]``.
        box: also draw a one-pixel outline just outside the digit.

    Returns:
        The digit's box ``(y0, x0, y1, x1)`` (end-exclusive).
    """
    s = img.shape[0]
    y0, x0 = y + 1, x + 1
    region = frame[y0 : y0 + s, x0 : x0 + s]
    np.maximum(region, img[..., None] * color, out=region)
    if box:  # a one-pixel outline just outside the digit
        frame[y0 - 1, x0 - 1 : x0 + s + 1] = color
        frame[y0 + s, x0 - 1 : x0 + s + 1] = color
        frame[y0 - 1 : y0 + s + 1, x0 - 1] = color
        frame[y0 - 1 : y0 + s + 1, x0 + s] = color
    return y0, x0, y0 + s, x0 + s


def _one_clip(
    rng: np.random.Generator,
    cfg: DigitsTaskConfig,
    images: np.ndarray,
    by_class: list[np.ndarray],
    label: int,
) -> tuple[np.ndarray, int, tuple[int, ...], tuple[int, ...], list[int]]:
    T, S, K = cfg.num_frames, cfg.size, cfg.num_choices
    video = np.zeros((T, S, S, 3), dtype=np.float32)
    white = np.ones(3, dtype=np.float32)
    used: list[int] = []

    def pick(cls: int, exclude: int = -1) -> np.ndarray:
        pool = by_class[cls]
        i = int(pool[rng.integers(len(pool))])
        while i == exclude and len(pool) > 1:
            i = int(pool[rng.integers(len(pool))])
        used.append(i)
        return images[i]

    # Last frame: K digits of distinct classes in K distinct colours. `slot` is the one the cue
    # refers to: pointer task -> its class is the label; match task -> its colour is the label.
    digits = np.asarray(cfg.digits)
    two_digits = cfg.task in ("same", "order")  # a boxed cue and one coloured digit
    if two_digits:
        K = 1
    spots = place_squares(rng, K, S, cfg.footprint)
    slot = int(rng.integers(K))
    if cfg.task == "order":  # any two classes; the label is the order of the frames
        a, b = int(rng.choice(digits)), int(rng.choice(digits))
        classes = np.array([b])
        colors = np.array([int(rng.integers(len(COLOR_NAMES)))])
    elif cfg.task == "same":
        a = int(rng.choice(digits))
        b = a if label == 1 else int(rng.choice(digits[digits != a]))
        classes = np.array([b])
        colors = np.array([int(rng.integers(len(COLOR_NAMES)))])
    elif cfg.task == "pointer":
        target = int(digits[label])
        others = rng.permutation(digits[digits != target])[: K - 1]
        classes = np.insert(others, slot, target)
        colors = rng.permutation(len(COLOR_NAMES))[:K]
    else:
        classes = rng.choice(digits, size=K, replace=False)
        colors = rng.permutation(K)
        j = int(np.flatnonzero(colors == label)[0])
        colors[j], colors[slot] = colors[slot], colors[j]  # the slot gets colour `label`
    match_box: tuple[int, ...] = ()
    match_id = -1
    for k in range(K):
        b = draw_digit(
            video[T - 1], pick(int(classes[k])), *spots[k], _COLORS[colors[k]], box=False
        )
        if k == slot:
            match_box, match_id = b, used[-1]
    cue = int(colors[slot]) if cfg.task == "pointer" else int(classes[slot])
    if two_digits:
        cue = a
    # Frames 0..T-2: white distractor digits; frame 0 also holds the cue.
    cue_box: tuple[int, ...] = ()
    for t in range(T - 1):
        n = cfg.distractors + (1 if t == 0 else 0)
        if n == 0:
            continue
        spots = place_squares(rng, n, S, cfg.footprint)
        for j, (y, x) in enumerate(spots):
            if t == 0 and j == 0 and cfg.task == "pointer":
                # a filled square in the colour of the target digit
                s, m = cfg.digit_size, cfg.marker_size
                y0, x0 = y + 1 + (s - m) // 2, x + 1 + (s - m) // 2
                video[0, y0 : y0 + m, x0 : x0 + m] = _COLORS[cue]
                cue_box = (y0, x0, y0 + m, x0 + m)
            elif t == 0 and j == 0 and two_digits:
                cue_box = draw_digit(video[0], pick(a, exclude=match_id), y, x, white, box=True)
            elif t == 0 and j == 0:
                if cfg.match == "image":
                    used.append(match_id)
                    cue_img = images[match_id]
                else:
                    cue_img = pick(cue, exclude=match_id)
                cue_box = draw_digit(video[0], cue_img, y, x, white, box=True)
            else:
                draw_digit(video[t], pick(int(rng.choice(digits))), y, x, white * 0.9, box=False)
    if cfg.noise > 0:
        video += rng.normal(0.0, cfg.noise, size=video.shape).astype(np.float32)
    clip = (np.clip(video, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    if cfg.task == "order" and label == 1:  # the same frames, played backwards
        clip = np.ascontiguousarray(clip[::-1])
        cue_box, match_box = match_box, cue_box  # boxes of the digits in frame 0 / last frame
    return clip, cue, cue_box, match_box, used


def generate_split(cfg: DigitsTaskConfig, split: str) -> DigitsTaskSplit:
    """Generate one split in memory (deterministic in ``cfg``; independent of the other splits).

    Args:
        cfg: the task configuration.
        split: "train", "val" or "test".

    Returns:
        A :class:`DigitsTaskSplit` with ``cfg.split_size(split)`` clips and balanced labels
        (counts differ by at most one).
    """
    n = cfg.split_size(split)
    images, labels = load_digit_bank(cfg.digit_size)
    pool = split_digit_indices(labels, cfg.split_fractions, cfg.seed)[split]
    by_class = [pool[labels[pool] == c] for c in range(10)]
    sid = SPLITS.index(split)
    targets = np.arange(n) % cfg.num_classes
    targets = targets[np.random.default_rng([cfg.seed, sid, 1]).permutation(n)]
    T, S = cfg.num_frames, cfg.size
    clips = np.zeros((n, T, S, S, 3), dtype=np.uint8)
    cue = np.zeros(n, dtype=np.int64)
    cue_box = np.zeros((n, 4), dtype=np.int64)
    match_box = np.zeros((n, 4), dtype=np.int64)
    ids: list[list[int]] = []
    for i in range(n):
        rng = np.random.default_rng([cfg.seed, sid, 2, i])
        clips[i], cue[i], cb, mb, used = _one_clip(rng, cfg, images, by_class, int(targets[i]))
        cue_box[i], match_box[i] = cb, mb
        ids.append(used)
    return DigitsTaskSplit(clips, targets.astype(np.int64), cue, cue_box, match_box, ids)


def generate_frames(
    cfg: DigitsTaskConfig,
    n: int,
    split: str = "train",
    *,
    colour_labels: bool = False,
    box_prob: float = 0.3,
) -> tuple[np.ndarray, np.ndarray]:
    """Single-digit frames for 2D pre-training (the role ImageNet plays in Section 4.1).

    Each frame shows one digit of ``cfg.digits`` (from the ``split`` pool only, so pre-training
    on "train" never sees a test image) at a random position, white or in a random palette
    colour, inside the cue's thin box with probability ``box_prob``, with the task's noise.
    (Without boxed examples the pre-trained features of the boxed cue are dominated by its box
    and the demo's non-local model fails to relate the cue to the last digit.)

    Args:
        cfg: the task configuration (size, digit size, digits, noise, seed).
        n: number of frames.
        split: digit-image pool to draw from.
        colour_labels: label = ``digit_index * 7 + colour`` (colour 0 = white, 1..6 = palette)
            instead of ``digit_index``.
        box_prob: probability of drawing the digit inside a box.

    Returns:
        ``(frames, labels)``: uint8 ``(n, size, size, 3)`` and int64 ``(n,)``.
    """
    images, labels = load_digit_bank(cfg.digit_size)
    pool = split_digit_indices(labels, cfg.split_fractions, cfg.seed)[split]
    pool = pool[np.isin(labels[pool], cfg.digits)]
    index = {d: i for i, d in enumerate(cfg.digits)}
    rng = np.random.default_rng([cfg.seed, SPLITS.index(split), 3])
    out = np.zeros((n, cfg.size, cfg.size, 3), dtype=np.float32)
    y = np.zeros(n, dtype=np.int64)
    for i in range(n):
        j = int(pool[rng.integers(len(pool))])
        colour = 0 if rng.random() < 0.3 else 1 + int(rng.integers(len(COLOR_NAMES)))
        rgb = np.ones(3, dtype=np.float32) if colour == 0 else _COLORS[colour - 1]
        (py, px) = place_squares(rng, 1, cfg.size, cfg.footprint)[0]
        draw_digit(out[i], images[j], py, px, rgb, box=bool(rng.random() < box_prob))
        y[i] = index[int(labels[j])] * (len(COLOR_NAMES) + 1 if colour_labels else 1)
        if colour_labels:
            y[i] += colour
    if cfg.noise > 0:
        out += rng.normal(0.0, cfg.noise, size=out.shape).astype(np.float32)
    return (np.clip(out, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8), y
