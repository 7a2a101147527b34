// the CUDA emulator stands in for the cuBLAS header of this name (tests/emu/cublaslt_emu.h)
#pragma once
#include "../cublaslt_emu.h"
