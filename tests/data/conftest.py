"""Shared fixtures of the data tests."""

import os

import pytest

from nlnet.data.video_io.backends import torchcodec_available, torchcodec_unavailable_reason


def _require_torchcodec() -> None:
    if torchcodec_available():
        return
    reason = f"torchcodec is not usable here: {torchcodec_unavailable_reason()}"
    if os.environ.get("NLNET_REQUIRE_TORCHCODEC") == "1":
        pytest.fail(reason + " (NLNET_REQUIRE_TORCHCODEC=1: .ci/run installed it)")
    pytest.skip(reason)


@pytest.fixture
def require_torchcodec():
    """Call it to skip without torchcodec; when CI installed it (NLNET_REQUIRE_TORCHCODEC=1), fail."""
    return _require_torchcodec
