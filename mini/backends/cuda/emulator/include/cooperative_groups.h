// cooperative_groups.h for mini's CUDA emulator.
#pragma once
#error "cooperative groups are not supported by mini's CUDA emulator; use __syncthreads and __shfl_*_sync"
