// Compiles one row of fwd_table.h (both dtypes, with and without dropout's
// path) for sm_90a: CMake builds this file once per row with ATTN_FWD_DQK / ATTN_FWD_DV set.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/flash_sm90/fwd_kernel.cuh"
#include "backends/flash_sm90/fwd_table.h"

#if !defined(ATTN_FWD_DQK) || !defined(ATTN_FWD_DV)
#error "build through CMake: ATTN_FWD_DQK and ATTN_FWD_DV name one row of fwd_table.h"
#endif

namespace attn::flash_sm90 {

#define ATTN_IS_ROW(dqk, dv) || (dqk == ATTN_FWD_DQK && dv == ATTN_FWD_DV)
static_assert(false ATTN_FLASH_SM90_FWD_TABLE(ATTN_IS_ROW), "ATTN_FWD_DQK/DV is not a row of fwd_table.h");
#undef ATTN_IS_ROW

// Each dtype with and without dropout's path (fwd_kernel.cuh).
#define ATTN_INSTANTIATE(dropout)                                                                              \
  template void launch_fwd<__nv_bfloat16, ATTN_FWD_DQK, ATTN_FWD_DV, dropout>(const Sm90FwdParams&, int, bool, \
                                                                             cudaStream_t);                    \
  template void launch_fwd<__half, ATTN_FWD_DQK, ATTN_FWD_DV, dropout>(const Sm90FwdParams&, int, bool,         \
                                                                      cudaStream_t);
ATTN_INSTANTIATE(false)
ATTN_INSTANTIATE(true)
#undef ATTN_INSTANTIATE

}  // namespace attn::flash_sm90
