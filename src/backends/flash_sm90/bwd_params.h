// flash_sm90's backward parameters: flash_sm80's BwdParams (the same problem
// description and workspace: row terms, the fp32 dQ accumulator, filled by
// the same host code and passes) plus TMA tensor maps of Q, K, V, dO, dK and dV.
#pragma once

#include <cuda.h>

#include "backends/flash/params.h"

namespace attn::flash_sm90 {

struct Sm90BwdParams {
  CUtensorMap q, dout;  // 4-D (column, token, head, sequence), 128B-swizzled boxes of 64 columns x 64 rows
  CUtensorMap k, v;     // the same, boxes of 64 columns x kBlockN rows
  CUtensorMap dk, dv;   // the same, boxes of 64 columns x 64 rows (one consumer's)
  flash::BwdParams p;
  // Query heads split over head_split CTAs per KV tile (flash::bwd_head_split):
  // each adds its dK (times the scale) and dV into dkv_accum, fp32, [h_kv][dkv_rows]
  // [d_qk] then [h_kv][dkv_rows][d_v], zeroed; bwd_convert_dkv writes them.
  int head_split = 1;
  float* dkv_accum = nullptr;
  int64_t dkv_rows = 0;  // b * s_kv, or thd's packed key tokens
};

}  // namespace attn::flash_sm90
