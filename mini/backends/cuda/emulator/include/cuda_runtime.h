// cuda_runtime.h for mini's CUDA emulator: everything CUDA C++ needs is in the emulator's header.
#pragma once
#include "mini_cuda_emulator.h"
