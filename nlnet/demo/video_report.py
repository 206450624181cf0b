"""The video demo's report: the Figure-3-style attention picture, attention statistics and the
results table (the learning curves: :mod:`nlnet.analysis.curves`) ("Non-local Neural Networks" (Wang et al., CVPR 2018,
arXiv:1711.07971): Figure 3, Figure 4, Table 2d).

Figures are drawn with the package's one matplotlib set-up (:func:`nlnet.analysis.plotting.pyplot`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from nlnet.data.digits.decoded import MEAN, STD
from nlnet.demo.video import DemoSettings

__all__ = ["plot_attention", "attention_statistics", "results_table", "attention_outputs"]


def plot_attention(
    model: torch.nn.Module,
    root: Path,
    x: torch.Tensor,
    records: list[dict[str, Any]],
    class_names: list[str],
    path: Path,
    device: torch.device,
    top_k: int = 20,
) -> list[dict[str, Any]]:
    """Figure-3-style picture: per clip, arrows from the cue to its ``top_k`` strongest keys.

    The query is the feature cell at the centre of the cue digit in frame 0 (from the manifest).
    Returns, per clip, the query, the fraction of its weight on the last frame and on the match.
    """
    from nlnet.analysis.plotting import pyplot

    plt = pyplot()

    from nlnet.analysis.attention_record import record_attention
    from nlnet.analysis.visualize import draw_arrows

    n, T = len(records), x.shape[2]
    with record_attention(model) as rec, torch.no_grad():
        logits = model.eval()(x.to(device))
    name = rec.names[0]
    attn = rec.maps[name].cpu()
    mapping = rec.mapping(name, x.shape[2:])
    fig, axes = plt.subplots(n, T, figsize=(1.5 * T, 1.75 * n), squeeze=False)
    frames = (x.permute(0, 2, 3, 4, 1) * torch.tensor(STD) + torch.tensor(MEAN)).clamp(0, 1)
    stats = []
    for i, r in enumerate(records):
        y0, x0, y1, x1 = r["cue_box"]
        q = mapping.query_index((0, (y0 + y1) // 2, (x0 + x1) // 2))
        w = attn[i, q]
        draw_arrows(list(axes[i]), frames[i].numpy(), w, mapping, q, top_k=top_k)
        key_t = torch.tensor([mapping.key_cell(j)[0] for j in range(mapping.num_keys)])
        last = float(w[key_t == mapping.key_size[0] - 1].sum())
        my0, mx0, my1, mx1 = r["match_box"]
        jm = mapping.key_index((T - 1, (my0 + my1) // 2, (mx0 + mx1) // 2))
        pred = class_names[int(logits[i].argmax())]
        axes[i][0].set_ylabel(f"target {class_names[r['label']]}\npred {pred}", fontsize=7)
        stats.append(
            {"file": r["file"], "query": q, "weight_last_frame": last, "weight_match": float(w[jm])}
        )
    fig.suptitle(
        f"{name}: the cue (frame 0) -> its {top_k} strongest keys across frames", fontsize=9
    )
    fig.subplots_adjust(left=0.04, right=0.99, bottom=0.02, top=0.9, wspace=0.05, hspace=0.3)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return stats


def attention_statistics(
    model: torch.nn.Module,
    x: torch.Tensor,
    records: list[dict[str, Any]],
    device: torch.device,
    batch: int = 100,
) -> dict[str, float]:
    """Mean attention weight from the cue to the last-frame digit and back, over test clips.

    The query/key cells are those containing the centres of the boxes recorded in the manifest
    (``cue_box`` in frame 0, ``match_box`` in the last frame); ``uniform`` is ``1 / N'``.
    """
    from nlnet.analysis.attention_record import record_attention

    cue_to_last, last_to_cue = [], []
    T = x.shape[2]
    model.eval()
    uniform = float("nan")
    for s in range(0, len(records), batch):
        xb = x[s : s + batch].to(device)
        with record_attention(model, to_cpu=True) as rec, torch.no_grad():
            model(xb)
        name = rec.names[0]
        attn = rec.maps[name]
        m = rec.mapping(name, xb.shape[2:])
        uniform = 1.0 / m.num_keys
        for i, r in enumerate(records[s : s + batch]):
            y0, x0, y1, x1 = r["cue_box"]
            my0, mx0, my1, mx1 = r["match_box"]
            cue = (0, (y0 + y1) // 2, (x0 + x1) // 2)
            last = (T - 1, (my0 + my1) // 2, (mx0 + mx1) // 2)
            cue_to_last.append(float(attn[i, m.query_index(cue), m.key_index(last)]))
            last_to_cue.append(float(attn[i, m.query_index(last), m.key_index(cue)]))
    return {
        "clips": len(cue_to_last),
        "cue_to_last_digit": float(np.mean(cue_to_last)),
        "last_digit_to_cue": float(np.mean(last_to_cue)),
        "uniform": uniform,
    }


def results_table(results: dict[str, dict[str, Any]], split: str = "test") -> str:
    """Model, parameters, multiply-adds, top-1 on ``split`` (``test``, or ``val`` for a
    screening run, whose test figures are never shown), gap to C2D, training time."""
    key = f"{split}_top1"
    base = results.get("c2d_tiny", {}).get(key)
    lines = [
        f"{'model':<20} {'params':>9} {'MACs':>8} {split + ' top-1':>10} {'vs C2D':>7} "
        f"{'train':>7}",
    ]
    for name, r in results.items():
        gap = "" if base is None or name == "c2d_tiny" else f"{100 * (r[key] - base):+.1f}"
        lines.append(
            f"{name:<20} {r['params'] / 1e3:>8.0f}k {r['macs'] / 1e6:>7.1f}M "
            f"{100 * r[key]:>9.1f}% {gap:>7} {r['train_time_s']:>6.0f}s"
        )
    return "\n".join(lines)


def attention_outputs(
    settings: DemoSettings,
    models: dict[str, torch.nn.Module],
    data: dict[str, tuple[torch.Tensor, torch.Tensor]],
    manifest: dict[str, Any],
    root: Path,
    run_dir: Path,
    device: torch.device,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
    """``attention.png`` for the first non-local model and attention statistics for each."""
    figure: list[dict[str, Any]] = []
    nl_name = next((n for n in settings.models if "_nl" in n), None)
    if nl_name is not None:
        recs = manifest["splits"]["test"][: settings.figure_clips]
        figure = plot_attention(
            models[nl_name], root, data["test"][0][: len(recs)], [{**r} for r in recs],
            manifest["classes"], run_dir / "attention.png", device,
        )  # fmt: skip
    stats = {}
    for name in (n for n in settings.models if "_nl" in n):
        n = min(len(data["test"][0]), 300)
        stats[name] = st = attention_statistics(
            models[name], data["test"][0][:n], manifest["splits"]["test"][:n], device
        )
        print(
            f"{name}: mean attention cue -> last digit {st['cue_to_last_digit']:.3f}, "
            f"last digit -> cue {st['last_digit_to_cue']:.3f} (uniform {st['uniform']:.3f})",
            flush=True,
        )
    return figure, stats
