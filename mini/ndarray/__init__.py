"""The strided array layer of mini (layer 1): buffers, views, primitive kernels."""
from mini.ndarray.dtypes import (dtype, float32, float64, int64, bool_, as_dtype,
                                 get_default_dtype, set_default_dtype)
from mini.ndarray.memory import AllocationStats, allocation_stats, track_allocations
from mini.ndarray.ndarray import NDArray, Storage
from mini.ndarray import strides

__all__ = ["NDArray", "Storage", "dtype", "float32", "float64", "int64", "bool_", "as_dtype",
           "get_default_dtype", "set_default_dtype", "AllocationStats", "allocation_stats",
           "track_allocations", "strides"]
