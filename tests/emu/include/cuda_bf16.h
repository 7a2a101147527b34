// the CUDA emulator stands in for the CUDA toolkit header of this name (tests/emu/cuda_emu.h)
#pragma once
#include "../cuda_emu.h"
