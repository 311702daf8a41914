// The one table of flash_sm90 backward instantiations: (d_qk, d_v) pairs, each
// built for bf16 and fp16, for sm_90a only. The host dispatch
// (flash_sm90_backward.cpp) and supports() read this macro; CMake reads these
// lines too (one object file per pair, from bwd_instantiate.cu).
#pragma once

// clang-format off
#define ATTN_FLASH_SM90_BWD_TABLE(X) \
  X(64, 64)                          \
  X(128, 128)                        \
  X(192, 128)                        \
  X(192, 192)                        \
  X(256, 256)
// clang-format on
