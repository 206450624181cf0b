"""Suite-wide fixtures."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread is faster than two and keeps timings stable on 2 cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class MaxNumel(TorchDispatchMode):
    """Records the largest tensor any aten op produces (a fast path must not build N x N')."""

    def __init__(self):
        super().__init__()
        self.max_numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.max_numel = max(self.max_numel, t.numel())
        return out


@pytest.fixture
def max_numel():
    """The :class:`MaxNumel` dispatch mode: ``with max_numel() as rec: ...; rec.max_numel``."""
    return MaxNumel


#: The longest tests of the suite (5-25 s each on 2 cores), run first: with ``-n auto
#: --dist worksteal`` a long test left to the end keeps one worker busy while the other idles.
#: Only the order changes (each still runs once, with its fixtures).
LONG_FIRST = (
    "tests/test_demo.py::test_quick_demo_smoke_and_the_same_figures_with_jobs_side_by_side",
    "tests/test_deploy.py::test_export_command_writes_a_file_that_runs",
    "tests/engine/test_cli_end_to_end.py::test_train_stop_resume_eval_predict",
    "tests/engine/test_distributed.py::test_two_process_ddp_equals_single_process",
    "tests/journeys/test_order_folder.py::test_an_i3d_starts_from_a_trained_c2d_by_model_init",
    "tests/test_dense_demo.py::test_nlnet_demo_segmentation_quick_trains_side_by_side",
    "tests/test_usecase_demos.py::test_unet_demo_quick",
    "tests/test_demo.py::test_seeds_command_runs_each_seed_and_reports_the_table",
    "tests/journeys/test_deep_supervision.py::test_deep_supervision_unet_from_config_to_every",
    "tests/journeys/test_finetune.py::test_model_facts_name_each_models_classifier_and_input",
)


def pytest_collection_modifyitems(config, items):
    """Move the :data:`LONG_FIRST` tests to the front, in that order (a stable sort)."""

    def rank(item) -> int:
        for i, prefix in enumerate(LONG_FIRST):
            if item.nodeid.startswith(prefix):
                return i
        return len(LONG_FIRST)

    items.sort(key=rank)
