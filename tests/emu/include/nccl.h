// the CUDA emulator stands in for NCCL here (tests/emu/nccl_emu.h: collectives over MPI)
#pragma once
#include "../nccl_emu.h"
