"""Insert non-local blocks into existing networks ("Non-local Neural Networks" (Wang et al., CVPR 2018, arXiv:1711.07971), Sections 4-6).

:func:`insert_non_local` puts a non-local block after the module found at each given path
(``"layer3.4"`` is the 5th residual block of res4 in torchvision naming). Because the block is an
identity at initialisation (BN scale gamma = 0, Section 4.1), the network computes exactly what it
computed before the insertion, so blocks can be added to a pre-trained model.

Where the block goes, and the resulting parameter names. The original module keeps its place and
all its parameter names; the new block is registered as a child called ``non_local`` of the module
at the path, so its parameters are ``<path>.non_local.theta.weight`` etc.:

* a module with a ``non_local`` slot that is ``None`` (our :class:`~nlnet.models.video.resnet3d.
  Bottleneck3d`) applies the block to its output itself;
* an ``nn.Sequential`` (a whole stage, e.g. ``"layer4"``) gets the block appended as its last
  element ``non_local``;
* any other module (e.g. a torchvision ``Bottleneck``/``BasicBlock``) gets the child and is
  switched to a subclass of its own class whose ``forward`` applies the block to the output
  (:func:`with_non_local_class`; same parameter names). Unlike a forward hook this is seen by
  FX tracing (``create_feature_extractor``), ``torch.compile``, ``torch.export`` and ONNX.

A state dict of the plain model therefore loads into the model with blocks through
:func:`nlnet.models.loading.load_partial` keeping the ``.non_local.`` keys, and the model with
blocks round-trips strictly.

Placement presets (Tables 2b and 2c), with ResNet stage names res2..res5 = ``layer1``..``layer4``
and 0-based block indices (see ``docs/models.md``):

* ``"nl1"``: one block in res4, right before its last residual block (after block ``n - 2``).
* ``"res2"`` .. ``"res5"``: one block right before the last residual block of that stage.
* ``"nl5"``: 2 blocks in res3 and 3 in res4, "at every other residual block". We follow the
  released code (``res_stage_nonlocal`` in ``lib/models/resnet_helper.py`` of
  facebookresearch/video-nonlocal-net: a block after block ``idx`` when
  ``idx % m == m - 1``): ``k`` blocks in a stage of ``n`` blocks go after blocks
  ``m-1, 2m-1, ..., km-1`` with ``m = n // k``. ResNet-50: res3 after 1, 3; res4 after 1, 3, 5.
  ResNet-101 (res4 has 23 blocks, ``m = 7``): res3 after 1, 3; res4 after 6, 13, 20, which is
  exactly the released code's ``layer_mod * 4 - 1 = 7`` rule for depth 101.
* ``"nl10"``: every residual block of res3 and res4 for ResNet-50 (4 + 6). ResNet-101, same
  rule with ``k = 4`` and ``k = 6``: res3 after 0, 1, 2, 3; res4 after 2, 5, 8, 11, 14, 17. (The
  released code's rule for depth 101 and ``LAYER_MOD = 1`` would give res3 after 1, 3 and res4
  after 2, 5, ..., 20, i.e. 9 blocks; we keep the paper's count of 10.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from nlnet.layers.nonlocal_block import NonLocalNd
from nlnet.models.resnet_layout import BLOCK_CONFIG, STAGE_NAMES

__all__ = [
    "PLACEMENTS",
    "insert_non_local",
    "non_local_blocks",
    "non_local_paths",
    "infer_channels",
    "measure_outputs",
    "with_non_local_class",
]

#: Named placement presets accepted by :func:`non_local_paths`.
PLACEMENTS: tuple[str, ...] = ("nl1", "nl5", "nl10", "res2", "res3", "res4", "res5")


def _every(n: int, k: int) -> list[int]:
    m = n // k
    if m < 1:
        raise ValueError(f"placement: cannot place {k} blocks in a stage of {n} residual blocks")
    return [m * (i + 1) - 1 for i in range(k)]


def non_local_paths(placement: str, layers: Sequence[int] = BLOCK_CONFIG[50]) -> list[str]:
    """Module paths (torchvision naming) after which the blocks of a preset go.

    Args:
        placement: one of :data:`PLACEMENTS` (``"nl1"``, ``"nl5"``, ``"nl10"``,
            ``"res2"``..``"res5"``).
        layers: residual blocks of res2..res5, ``(3, 4, 6, 3)`` (R50) or ``(3, 4, 23, 3)`` (R101).

    Returns:
        Paths such as ``["layer2.1", "layer2.3", "layer3.1", "layer3.3", "layer3.5"]``.
    """
    layers = tuple(int(n) for n in layers)
    if len(layers) != 4 or min(layers) < 1:
        raise ValueError(f"layers: expected 4 positive stage lengths, got {layers!r}")
    n2, n3, n4, n5 = layers
    if placement == "nl1":
        placement = "res4"
    if placement in STAGE_NAMES:
        n = dict(zip(STAGE_NAMES, layers))[placement]
        # "right before the last residual block of a stage" = after block n - 2 (Table 2b).
        return [f"{STAGE_NAMES[placement]}.{max(n - 2, 0)}"]
    if placement == "nl5":
        return [f"layer2.{i}" for i in _every(n3, 2)] + [f"layer3.{i}" for i in _every(n4, 3)]
    if placement == "nl10":
        return [f"layer2.{i}" for i in _every(n3, 4)] + [f"layer3.{i}" for i in _every(n4, 6)]
    raise ValueError(f"placement: expected one of {PLACEMENTS}, got {placement!r}")


def _get(model: nn.Module, path: str) -> nn.Module:
    try:
        return model.get_submodule(path)
    except AttributeError as err:
        top = [n for n, _ in model.named_children()]
        raise ValueError(
            f"at: no module at path {path!r} in {type(model).__name__} (top-level children: {top})"
        ) from err


def infer_channels(module: nn.Module) -> int:
    """Output channels of a residual block / stage / conv layer.

    Bottleneck: ``bn3.num_features`` (= ``conv3.out_channels``); BasicBlock: ``bn2``/``conv2``;
    ``nn.Sequential``: its last element; a conv or BN layer: its own channels; otherwise the last
    conv/BN layer registered inside it.
    """
    for name in ("bn3", "conv3", "bn2", "conv2"):
        sub = getattr(module, name, None)
        if isinstance(sub, nn.Module):
            c = _own_channels(sub)
            if c is not None:
                return c
    if isinstance(module, nn.Sequential) and len(module) > 0:
        # the last member with layers of its own (an activation, pool or dropout keeps the
        # channels of what came before it)
        members = [m for n, m in module.named_children() if n != "non_local"]
        for m in reversed(members):
            if next(m.parameters(), None) is not None:
                return infer_channels(m)
    c = _own_channels(module)
    if c is not None:
        return c
    for sub in reversed(list(module.modules())):
        c = _own_channels(sub)
        if c is not None:
            return c
    raise ValueError(
        f"cannot infer the output channels of a {type(module).__name__}; pass in_channels="
    )


def _own_channels(m: nn.Module) -> int | None:
    if isinstance(m, nn.modules.conv._ConvNd):
        return m.out_channels
    if isinstance(m, nn.modules.batchnorm._NormBase):
        return m.num_features
    if isinstance(m, nn.GroupNorm):
        return m.num_channels
    return None


def _infer_dim(module: nn.Module) -> int:
    for m in reversed(list(module.modules())):
        if isinstance(m, (nn.Conv3d, nn.BatchNorm3d)):
            return 3
        if isinstance(m, (nn.Conv2d, nn.BatchNorm2d)):
            return 2
        if isinstance(m, (nn.Conv1d, nn.BatchNorm1d)):
            return 1
    raise ValueError(f"cannot infer whether a {type(module).__name__} is 1D, 2D or 3D; pass dim=")


_WITH_NON_LOCAL: dict[type, type] = {}


def _restore_with_non_local(base: type) -> nn.Module:
    # unpickling / deepcopy: recreate the (cached) subclass of ``base`` before the state is set
    cls = with_non_local_class(base)
    return cls.__new__(cls)


def with_non_local_class(base: type) -> type:
    """The subclass of ``base`` whose ``forward`` applies ``self.non_local`` to the output.

    :func:`insert_non_local` switches a module without a native ``non_local`` slot (e.g. a
    torchvision ``Bottleneck``) to this class, which keeps every parameter name and, unlike a
    forward hook, is seen by ``torch.fx`` tracing, ``torch.compile`` and ``torch.export``.
    """
    if base in _WITH_NON_LOCAL.values():
        return base
    if base not in _WITH_NON_LOCAL:

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return self.non_local(base.forward(self, *args, **kwargs))

        def __reduce_ex__(self, protocol: int) -> Any:
            return (_restore_with_non_local, (base,), self.__dict__)

        _WITH_NON_LOCAL[base] = type(
            base.__name__,
            (base,),
            {"forward": forward, "__reduce_ex__": __reduce_ex__, "__module__": base.__module__},
        )
    return _WITH_NON_LOCAL[base]


def insert_non_local(
    model: nn.Module,
    at: str | Sequence[str],
    *,
    layers: Sequence[int] | None = None,
    in_channels: int | None = None,
    dim: int | None = None,
    example_input: Any = None,
    **block_options: Any,
) -> nn.Module:
    """Insert a non-local block after each module in ``at`` (in place) and return ``model``.

    Args:
        model: any ``nn.Module`` (torchvision image ResNet, :class:`ResNet3d`, ...).
        at: module paths (``"layer3.4"``, ``"layer4"``) or a placement preset from
            :data:`PLACEMENTS` (needs ``layers``, taken from ``model.layers_cfg`` or from the
            lengths of ``model.layer1..layer4`` when omitted).
        layers: stage lengths for a preset; inferred from the model by default.
        in_channels: channels of the block; inferred from the module at the path by default
            (:func:`infer_channels`: its last convolution or norm, which a module that
            concatenates branches, such as an Inception block, does not end with).
        dim: 1, 2 or 3 (which ``NonLocalNd``); inferred from the convolutions inside the module.
        example_input: an input of ``model`` (a tensor, or a tuple of its arguments): the
            channels and dim of each block are then measured on the output of its module in
            one forward pass (eval mode, no gradients, the model's mode restored), exact for
            any module whose output is ``(B, C, *grid)`` (a concatenation of branches too);
            an output with its channels on another axis (channels last, tokens) is refused.
        **block_options: passed to the block (``instantiation``, ``inter_channels``,
            ``reduction``, ``sub_sample``, ``pool_position``, ``norm``, ``mode``, ``scale``,
            ``impl``); defaults are the paper's video settings (embedded Gaussian, half channels,
            spatial max-pool subsampling, BN with gamma = 0).

    Returns:
        The same ``model`` with blocks at ``<path>.non_local``.

    Raises:
        ValueError: unknown path, a path that already has a block, or channels/dim that cannot
            be inferred.
    """
    from nlnet.layers.nonlocal_block import NonLocal1d, NonLocal2d, NonLocal3d

    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    if isinstance(at, str) and at in PLACEMENTS:
        if layers is None:
            layers = getattr(model, "layers_cfg", None) or _stage_lengths(model)
        paths = non_local_paths(at, layers)
    elif isinstance(at, str):
        if not at:
            raise ValueError("at: expected a module path such as 'layer3', got '' (the model)")
        paths = [at]
    else:
        try:
            paths = list(at)  # any iterable of paths (a list, a tuple, a config's list)
        except TypeError:
            paths = [None]
        if not paths or not all(isinstance(p, str) and p for p in paths):
            raise TypeError(f"at: expected a module path or a list of them (str), got {at!r}")
    if len(set(paths)) != len(paths):
        raise ValueError(f"at: duplicate paths in {paths}")
    if dim is not None and dim not in (1, 2, 3):
        raise ValueError(f"dim: expected 1, 2 or 3, got {dim!r}")
    options = block_options  # the block's defaults are the paper's video block (Sec. 4.1)
    classes = {1: NonLocal1d, 2: NonLocal2d, 3: NonLocal3d}
    targets = [(p, _get(model, p)) for p in paths]  # validate all paths before changing anything
    for path, module in targets:
        if _has_block(module):
            raise ValueError(f"at: module {path!r} already has a non-local block")
        if isinstance(module, (nn.ModuleDict, nn.ModuleList)):  # its owner iterates or indexes it
            raise ValueError(
                f"at: module {path!r} is a {type(module).__name__}, a container whose members "
                "its owner calls or iterates (a block added to it would not run, or would run "
                f"as a member); name one of its members, e.g. '{path}.{next(iter(module._modules), '0')}'"
            )
    exact = example_input is None or (in_channels is not None and dim is not None)
    measured = {} if exact else measure_outputs(model, paths, example_input)
    for path, module in targets:
        c, d = measured.get(path, (in_channels, dim))
        c = in_channels if in_channels is not None else c
        d = dim if dim is not None else d
        try:
            d = d if d is not None else _infer_dim(module)
            c = c if c is not None else infer_channels(module)
        except ValueError as exc:
            raise ValueError(f"at: module {path!r}: {exc} (or example_input=)") from None
        block = classes[d](c, **options)
        if in_channels is None and path not in measured:
            block.channels_hint = (
                f"; insert_non_local inferred in_channels={block.in_channels} from the layers "
                f"of {path!r} ({type(module).__name__}): pass in_channels= (its output's) or "
                "example_input="
            )
        ref = next(iter(module.parameters()), None)
        if ref is not None:
            block = block.to(device=ref.device, dtype=ref.dtype)
        block.train(module.training)
        if "non_local" in module._modules and module._modules["non_local"] is None:
            module.non_local = block  # native slot (Bottleneck3d)
        elif isinstance(module, nn.Sequential):
            module.add_module("non_local", block)  # appended: runs last
        else:
            if hasattr(module, "non_local"):
                raise ValueError(f"at: module {path!r} already has an attribute 'non_local'")
            module.add_module("non_local", block)
            module.__class__ = with_non_local_class(type(module))
    return model


def measure_outputs(
    model: nn.Module, paths: Sequence[str], example_input: Any
) -> dict[str, tuple[int, int]]:
    """``{path: (channels, dim)}`` of the outputs ``(B, C, *grid)`` of the modules at ``paths``
    in one forward pass of ``example_input`` (a tensor or a tuple of arguments), in eval mode
    without gradients (BatchNorm statistics untouched); the model's modes are restored.

    Raises:
        ValueError: a module at a path did not run, or its output is not a ``(B, C, *grid)``
            tensor of 1 to 3 grid axes.
    """
    outputs: dict[str, Any] = {}
    hooks = [
        model.get_submodule(p).register_forward_hook(
            lambda _m, _a, out, p=p: outputs.setdefault(p, out)
        )
        for p in paths
    ]
    modes = {m: m.training for m in model.modules()}
    args = example_input if isinstance(example_input, tuple) else (example_input,)
    try:
        model.eval()
        with torch.no_grad():
            model(*args)
    finally:
        for h in hooks:
            h.remove()
        for m, mode in modes.items():
            m.training = mode
    found = {}
    for p in paths:
        out = outputs.get(p)
        if p not in outputs:
            raise ValueError(f"example_input: module {p!r} did not run in the forward pass")
        if not isinstance(out, torch.Tensor) or not 3 <= out.dim() <= 5:
            what = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(
                f"at: the output of {p!r} is {what}, not a (B, C, *grid) tensor with 1 to 3 "
                "grid axes that a non-local block takes"
            )
        # channels last (Swin's stages, a ViT's tokens): axis 1 is no width of the module's
        # layers and the last axis is the width of a linear layer or layer norm in it (a
        # concatenation of convolution branches has a width of its own on axis 1)
        conv, token = _layer_widths(model.get_submodule(p))
        if int(out.shape[1]) not in conv | token and int(out.shape[-1]) in token:
            raise ValueError(
                f"at: the output of {p!r} is {tuple(out.shape)}: its last axis is the width of "
                f"its linear layers ({sorted(token)}), axis 1 is no width of its layers: not the "
                "(B, C, *grid) layout a non-local block takes (channels last, or tokens?); "
                "insert it where the network holds (B, C, *grid) maps, or pass in_channels= and "
                "dim= if it is one"
            )
        found[p] = (int(out.shape[1]), out.dim() - 2)
    return found


def _layer_widths(module: nn.Module) -> tuple[set[int], set[int]]:
    """The output widths of the layers inside ``module``: convolutions' and norms' channels,
    and linear layers' features with layer norms' last axis (the widths of token layouts)."""
    conv: set[int] = set()
    token: set[int] = set()
    for m in module.modules():
        c = _own_channels(m)
        if c is not None:
            conv.add(c)
        elif isinstance(m, nn.Linear):
            token.add(m.out_features)
        elif isinstance(m, nn.LayerNorm) and m.normalized_shape:
            token.add(int(m.normalized_shape[-1]))
    return conv, token


def _stage_lengths(model: nn.Module) -> tuple[int, ...]:
    try:
        stages = [model.get_submodule(f"layer{i}") for i in range(1, 5)]
    except AttributeError as err:
        raise ValueError(
            "at: a placement preset needs stages layer1..layer4 or layers=(n2, n3, n4, n5)"
        ) from err
    return tuple(sum(1 for n, _ in s.named_children() if n != "non_local") for s in stages)


def _has_block(module: nn.Module) -> bool:
    return isinstance(module._modules.get("non_local"), nn.Module)


def non_local_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """All non-local blocks of ``model`` as ``(qualified name, block)`` pairs, in order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, NonLocalNd)]
