"""Pure tensor operations (no parameters): the non-local operation and the attention toolkit."""

from nlnet.functional.nonlocal_op import (
    INSTANTIATIONS,
    choose_impl,
    non_local,
    pairwise_weights,
)

__all__ = ["INSTANTIATIONS", "choose_impl", "non_local", "pairwise_weights"]
