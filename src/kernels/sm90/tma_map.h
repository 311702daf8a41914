// TMA tensor maps on the host: a 4-D (column, token, head, sequence) view of
// one of attn's 2-byte tensors, copied in boxes of 64 columns x `box_rows`
// tokens with the 128-byte swizzle (the layout wgmma.cuh describes). The
// driver's encoder is found at run time (cudaGetDriverEntryPointByVersion),
// so attn links only the CUDA runtime.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace attn::sm90 {

struct TileMapShape {
  const void* base = nullptr;  // 16-byte aligned
  bool bf16 = true;            // else fp16
  int64_t cols = 0, tokens = 0, heads = 0, sequences = 0;
  int64_t token_stride = 0, head_stride = 0, sequence_stride = 0;  // elements
  int box_rows = 0;
};

// Throws attn::Error (what, got, expected, fix) when the driver refuses the
// shape, e.g. a stride that is not a multiple of 16 bytes.
CUtensorMap make_tile_map(const TileMapShape& s, const char* tensor_name);

}  // namespace attn::sm90
