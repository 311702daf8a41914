// Launching flash_decode's kernels for one row of decode_table.h (defined in
// decode_instantiate.cu, one object per row).
#pragma once

#include <cuda_runtime.h>

#include "backends/flash_decode/decode_params.h"

namespace attn::flash_decode {

// The decode kernel (dp.row_blocks' build) over grid (m_blocks * splits,
// h_kv, batch), then, with splits > 1, the combine kernel.
template <typename T, int kDQK, int kDV>
void launch_decode(const DecodeParams& dp, int h_kv, cudaStream_t stream);

// CTAs of the decode kernel (with `row_blocks` row blocks) one SM of
// `device` holds at once (its shared memory and registers), for the split
// heuristic; 0 when it does not fit. Makes `device` current.
template <int kDQK, int kDV>
int decode_ctas_per_sm(int device, int row_blocks);

}  // namespace attn::flash_decode
