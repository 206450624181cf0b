"""The worked examples of the encyclopedia article "Self-Attention" ("Examples") as acceptance tests.

The expected values are the article's printed outputs, compared to the printed precision.
"""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "self_attention"

ARTICLE_MAP = [
    [0.02, 0.17, 0.19, 0.03, 0, 0, 0, 0],
    [0.01, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0.02, 0.15, 0.21, 0.03],
    [0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0],
]
ARTICLE_TOP = [(4, 6), (0, 2), (0, 1), (4, 5), (4, 7), (0, 3)]
# d_k, logit std (.1f), max weight raw / scaled (.2f), Jacobian norm raw / scaled (.3f)
ARTICLE_TABLE = [
    (4, 2.0, 0.28, 0.17, 0.313, 0.285),
    (16, 4.1, 0.45, 0.18, 0.318, 0.289),
    (64, 8.2, 0.60, 0.18, 0.269, 0.288),
    (256, 16.3, 0.74, 0.18, 0.200, 0.290),
    (1024, 32.1, 0.81, 0.17, 0.142, 0.289),
]


@pytest.fixture
def load(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the scripts import their _sa_data helper
    sys.modules.pop("_sa_data", None)

    def _load(name):
        spec = importlib.util.spec_from_file_location(f"sa_example_{name}", EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    yield _load
    sys.modules.pop("_sa_data", None)


def test_patch_attention_two_squares(load):
    res = load("patch_attention").main(verbose=False)
    np.testing.assert_array_equal(np.round(res["map"], 2), np.array(ARTICLE_MAP))
    assert res["top"] == ARTICLE_TOP
    assert res["edge_weight"] == 0.357
    assert res["lines"][1].splitlines()[0] == "[[0.02 0.17 0.19 0.03 0.   0.   0.   0.  ]"
    # each row of the map is a distribution
    assert math.isclose(float(res["weights"][1].sum()), 1.0, abs_tol=1e-12)


def test_multi_head_permutation_window(load, capsys):
    res = load("multi_head_window").main()
    assert res["output_shape"] == (64, 16)
    assert res["maps_shape"] == (4, 64, 64)
    assert res["parameters"] == 4 * 16 * 16 == 1024
    assert res["equivariant"] is True
    assert res["mass_outside"] == 0.0
    assert (res["entries_global"], res["entries_windowed"]) == (4096, 1024)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "output (64, 16) attention maps (4, 64, 64) parameters 1024",
        "f(X[perm]) == f(X)[perm]: True",
        "patch (0,1): attention mass outside its window: 0.0",
        "score entries per head: global 4096 windowed 1024",
    ]


def test_sqrt_dk_on_digits(load):
    res = load("sqrt_dk_digits").main(verbose=False)
    assert len(res["rows"]) == len(ARTICLE_TABLE)
    for got, want in zip(res["rows"], ARTICLE_TABLE):
        assert got[0] == want[0]
        assert f"{got[1]:.1f}" == f"{want[1]:.1f}"
        assert f"{got[2]:.2f} / {got[3]:.2f}" == f"{want[2]:.2f} / {want[3]:.2f}"
        assert f"{got[4]:.3f} / {got[5]:.3f}" == f"{want[4]:.3f} / {want[5]:.3f}"
    # the printed table has the article's layout
    assert res["lines"][1] == "    4       2.0      0.28 / 0.17                0.313 / 0.285"


def test_agreement_with_pytorch(load):
    res = load("pytorch_agreement").main(verbose=False)
    # the article prints rounding-level differences (~1e-17); their digits depend on the BLAS
    for key in ("output", "maps", "windowed", "sdpa_head0"):
        assert res[key] < 1e-15, key
    assert res["parameters"] == res["parameters_nlnet"] == 1024
    assert res["lines"][0].startswith("torch ")
