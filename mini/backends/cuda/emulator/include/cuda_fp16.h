// cuda_fp16.h for mini's CUDA emulator.
#pragma once
#error "half precision (__half, cuda_fp16.h) is not supported by mini's CUDA emulator; use float"
