// Compiles one row of fwd_table.h (both dtypes): CMake builds this file once
// per row with ATTN_FWD_DQK / ATTN_FWD_DV set, so the rows compile in parallel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/flash_sm80/fwd_kernel.cuh"
#include "backends/flash_sm80/fwd_table.h"

#if !defined(ATTN_FWD_DQK) || !defined(ATTN_FWD_DV)
#error "build through CMake: ATTN_FWD_DQK and ATTN_FWD_DV name one row of fwd_table.h"
#endif

namespace attn::flash_sm80 {

#define ATTN_IS_ROW(dqk, dv) || (dqk == ATTN_FWD_DQK && dv == ATTN_FWD_DV)
static_assert(false ATTN_FLASH_SM80_FWD_TABLE(ATTN_IS_ROW), "ATTN_FWD_DQK/DV is not a row of fwd_table.h");
#undef ATTN_IS_ROW

#define ATTN_INSTANTIATE(build)                                                                             \
  template void launch_fwd<__nv_bfloat16, ATTN_FWD_DQK, ATTN_FWD_DV, build>(const flash::FwdParams&, cudaStream_t); \
  template void launch_fwd<__half, ATTN_FWD_DQK, ATTN_FWD_DV, build>(const flash::FwdParams&, cudaStream_t);
ATTN_INSTANTIATE(FwdBuild::wide)
#if ATTN_SM80_FWD_NARROW(ATTN_FWD_DQK)
ATTN_INSTANTIATE(FwdBuild::narrow)
#endif
#if ATTN_SM80_FWD_DROPOUT_APART(ATTN_FWD_DQK)
ATTN_INSTANTIATE(FwdBuild::dropout)
#endif
#undef ATTN_INSTANTIATE

}  // namespace attn::flash_sm80
