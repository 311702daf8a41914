// The one table of flash_sm80 backward instantiations: (d_qk, d_v) pairs, each
// built for bf16 and fp16, as fwd_table.h is for the forward (CMake compiles
// bwd_instantiate.cu once per row; the host dispatch and supports() read it).
#pragma once

// clang-format off
#define ATTN_FLASH_SM80_BWD_TABLE(X) \
  X(32, 32)                          \
  X(64, 64)                          \
  X(96, 96)                          \
  X(128, 128)                        \
  X(160, 160)                        \
  X(192, 192)                        \
  X(192, 128)                        \
  X(256, 256)
// clang-format on
