// Compiles one row of bwd_table.h (both dtypes) for sm_90a: CMake builds this
// file once per row with ATTN_BWD_DQK / ATTN_BWD_DV set.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/flash_sm90/bwd_kernel.cuh"
#include "backends/flash_sm90/bwd_table.h"

#if !defined(ATTN_BWD_DQK) || !defined(ATTN_BWD_DV)
#error "build through CMake: ATTN_BWD_DQK and ATTN_BWD_DV name one row of bwd_table.h"
#endif

namespace attn::flash_sm90 {

#define ATTN_IS_ROW(dqk, dv) || (dqk == ATTN_BWD_DQK && dv == ATTN_BWD_DV)
static_assert(false ATTN_FLASH_SM90_BWD_TABLE(ATTN_IS_ROW), "ATTN_BWD_DQK/DV is not a row of bwd_table.h");
#undef ATTN_IS_ROW

#define ATTN_INSTANTIATE(score_mods, dropout)                                                           \
  template void launch_bwd<__nv_bfloat16, ATTN_BWD_DQK, ATTN_BWD_DV, score_mods, dropout>(const Sm90BwdParams&, \
                                                                                           bool, cudaStream_t); \
  template void launch_bwd<__half, ATTN_BWD_DQK, ATTN_BWD_DV, score_mods, dropout>(const Sm90BwdParams&, bool,  \
                                                                                    cudaStream_t);
ATTN_INSTANTIATE(false, false)
ATTN_INSTANTIATE(true, false)
ATTN_INSTANTIATE(true, true)
ATTN_INSTANTIATE(false, true)
#undef ATTN_INSTANTIATE

}  // namespace attn::flash_sm90
