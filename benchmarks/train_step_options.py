"""A training step with the field's speed options against the plain eager step, in one run.

The options of ``train:`` that change speed but not numbers (docs/training.md, "Speed"):
``channels_last`` (weights, and so activations, in ``torch.channels_last_3d``) and ``compile``
(``torch.compile`` of the forward, backward by AOTAutograd). Each variant is a copy of the same
model (same seed) stepping with SGD on the same batch; the rounds are interleaved (one step of
each variant per round) so that the machine's load falls on all of them alike. Printed per
variant: the median step time, the ratio plain / variant (> 1: faster), the one-time compile
cost, the difference of its first step's loss from the plain step's (same weights: they
compute the same thing within float rounding), the relative difference of the whole state
after that one update, and the loss difference after the last step.

    python benchmarks/train_step_options.py                               # c2d_r50_nl5, CPU
    python benchmarks/train_step_options.py --model c2d_tiny_nl1 --size 32 --rounds 10
    python benchmarks/train_step_options.py --device cuda --batch 8 --frames 32 --size 224

``--variants freeze_bn freeze_bn+fold``: fine-tuning with frozen BatchNorm (``train.freeze_bn``,
Sec. 5.1), plain and with each frozen BatchNorm folded into its convolution
(``train.fold_frozen_bn``).

``--model r3d_18`` is nlnet's R3D-18 (a ``ResNet3d`` of basic blocks,
:mod:`nlnet.models.video.torchvision_r3d`), and the variant ``torchvision`` is torchvision's own
``r3d_18`` with the same weights: an independent implementation of the same network, timed in
the same run (``--variants torchvision eager channels_last``: ratios against torchvision's step).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

VARIANTS = {
    "eager": {},
    "channels_last": {"channels_last": True},
    "compile": {"compile": "inductor"},
    "compile+channels_last": {"channels_last": True, "compile": "inductor"},
    "torchvision": {"torchvision": True},  # --model r3d_18 only
    # fine-tuning with frozen BatchNorm (Sec. 5.1): plain, and folded into the convolutions
    "freeze_bn": {"freeze_bn": True},
    "freeze_bn+fold": {"freeze_bn": True, "fold_frozen_bn": True},
}


def build(name: str, options: dict, device: torch.device, width: int | None, x: torch.Tensor):
    """The model of ``name`` (seed 0) with ``options`` as the engine applies them, its SGD and
    the module the step calls."""
    from nlnet.engine.modeling import compiled_for_training, to_channels_last
    from nlnet.models.registry import create_model

    torch.manual_seed(0)
    # no dropout: each variant would draw other masks from the one generator
    kwargs = {"width": width, "dropout": 0.0} if width else {"dropout": 0.0}
    model = create_model(name, num_classes=400, **kwargs)
    if options.get("torchvision"):
        model = torchvision_twin(model)
    model = model.to(device).train()
    if options.get("channels_last"):
        to_channels_last(model)
    if options.get("freeze_bn"):
        import warnings

        from nlnet.engine.folding import fold_frozen_batchnorm
        from nlnet.engine.modeling import freeze_batchnorm

        with torch.no_grad():  # statistics of the batch, as a pre-trained model's would be
            for m in model.modules():
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                    m.momentum = None  # cumulative average: one pass sets them
                    m.reset_running_stats()
            model(x)
        with warnings.catch_warnings():  # the fresh blocks' norms stay trainable, as in train()
            warnings.simplefilter("ignore", RuntimeWarning)
            freeze_batchnorm(model)
        if options.get("fold_frozen_bn"):
            print(f"  folded {fold_frozen_batchnorm(model)} BatchNorm layers", file=sys.stderr)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    return model, opt, compiled_for_training(model, options.get("compile", "none"))


def torchvision_twin(ours: torch.nn.Module) -> torch.nn.Module:
    """torchvision's own ``r3d_18`` holding the weights of nlnet's ``r3d_18`` (``ours``)."""
    from torchvision.models.video import r3d_18

    from nlnet.models.video.torchvision_r3d import r3d_state_from_torchvision

    if ours.conv1.out_channels != 64:
        raise SystemExit("--width: torchvision's r3d_18 has width 64 only")
    theirs = r3d_18(num_classes=400)
    names = dict(zip(r3d_state_from_torchvision(theirs.state_dict()), theirs.state_dict()))
    theirs.load_state_dict({names[k]: v for k, v in ours.state_dict().items()})
    return theirs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="c2d_r50_nl5")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--size", type=int, default=112)
    p.add_argument("--width", type=int, default=0, help="model width (0: the model's own)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    args = p.parse_args(argv)
    if "torchvision" in args.variants and args.model != "r3d_18":
        p.error("--variants torchvision: only with --model r3d_18")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 3, args.frames, args.size, args.size, generator=g).to(device)
    y = torch.randint(0, 400, (args.batch,), generator=g).to(device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    runs = {}
    for v in args.variants:
        model, opt, fwd = build(args.model, VARIANTS[v], device, args.width or None, x)
        runs[v] = {"model": model, "opt": opt, "fwd": fwd, "times": [], "losses": []}

    def step(r: dict) -> float:
        r["opt"].zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(r["fwd"](x), y)
        loss.backward()
        r["opt"].step()
        return float(loss.detach())

    for v, r in runs.items():  # the first step compiles
        t = time.perf_counter()
        r["losses"].append(step(r))
        sync()
        r["first_s"] = time.perf_counter() - t
        r["first"] = [w.detach().clone() for w in r["model"].state_dict().values()]
        print(f"  {v}: first step {r['first_s']:.1f} s", file=sys.stderr, flush=True)
    for _ in range(args.rounds):
        for r in runs.values():
            t = time.perf_counter()
            r["losses"].append(step(r))
            sync()
            r["times"].append(time.perf_counter() - t)
    ref = runs[args.variants[0]]
    ref_s = statistics.median(ref["times"])
    print(f"\n{args.model}, SGD step, batch {args.batch} x 3 x {args.frames} x {args.size} x "
          f"{args.size}, device {args.device}, threads {torch.get_num_threads()}, "
          f"median of {args.rounds} interleaved rounds")  # fmt: skip
    print(f"{'variant':<24}{'step s':>8}{'ratio':>8}{'first step s':>14}{'|dloss| 1st':>13}"
          f"{'rel dstate 1st':>15}{'|dloss| last':>14}")  # fmt: skip
    for v, r in runs.items():
        med = statistics.median(r["times"])
        pairs = [(a, b) for a, b in zip(r["first"], ref["first"]) if a.is_floating_point()]
        dw = (sum(float((a - b).double().norm()) ** 2 for a, b in pairs)
              / sum(float(b.double().norm()) ** 2 for _, b in pairs)) ** 0.5  # fmt: skip
        print(f"{v:<24}{med:>8.3f}{ref_s / med:>8.2f}{r['first_s']:>14.1f}"
              f"{abs(r['losses'][0] - ref['losses'][0]):>13.2e}{dw:>15.2e}"
              f"{abs(r['losses'][-1] - ref['losses'][-1]):>14.2e}")  # fmt: skip
    print(
        f"(ratio: {args.variants[0]} step time / the variant's; > 1 is faster; |dloss| 1st: "
        "the first step's loss (same weights), rel dstate 1st: ||state - plain|| / ||plain|| "
        "over every weight and BN statistic after that one update; |dloss| last: after every step, where a few "
        "steps on one batch can grow rounding differences)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
