// The one table of flash_sm80 forward instantiations: (d_qk, d_v) pairs, each
// built for bf16 and fp16. The host dispatch (flash_sm80_forward.cpp) and
// supports() read this macro; CMake reads these lines too (one object file per
// pair, compiled from fwd_instantiate.cu, so a many-core build runs them in
// parallel). Keep it short: every entry is compiled for sm_80 and sm_90a.
#pragma once

// clang-format off
#define ATTN_FLASH_SM80_FWD_TABLE(X) \
  X(32, 32)                          \
  X(64, 64)                          \
  X(96, 96)                          \
  X(128, 128)                        \
  X(160, 160)                        \
  X(192, 192)                        \
  X(192, 128)                        \
  X(256, 256)
// clang-format on
