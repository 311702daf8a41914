// The decode kernel's instantiation table: X(d_qk, d_v) rows, each compiled
// (bf16 and fp16, with its split combine) into its own object from
// decode_instantiate.cu. The head dims issue 43 names; keep it short.
#pragma once

// clang-format off
#define ATTN_FLASH_DECODE_TABLE(X) \
  X(64, 64)                        \
  X(128, 128)                      \
  X(192, 128)                      \
  X(256, 256)
// clang-format on
