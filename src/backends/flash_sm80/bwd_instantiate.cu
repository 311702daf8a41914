// Compiles one row of bwd_table.h (both dtypes): CMake builds this file once
// per row with ATTN_BWD_DQK / ATTN_BWD_DV set, so the rows compile in parallel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/flash_sm80/bwd_kernel.cuh"
#include "backends/flash_sm80/bwd_table.h"

#if !defined(ATTN_BWD_DQK) || !defined(ATTN_BWD_DV)
#error "build through CMake: ATTN_BWD_DQK and ATTN_BWD_DV name one row of bwd_table.h"
#endif

namespace attn::flash_sm80 {

#define ATTN_IS_ROW(dqk, dv) || (dqk == ATTN_BWD_DQK && dv == ATTN_BWD_DV)
static_assert(false ATTN_FLASH_SM80_BWD_TABLE(ATTN_IS_ROW), "ATTN_BWD_DQK/DV is not a row of bwd_table.h");
#undef ATTN_IS_ROW

// The row's entries (bwd_launch.h) compile its main build and, where
// kBwdTuning gives the row one, its dropout build (bwd_config.h). The main
// builds are named first so that the object holds its kernels in one order:
// both main builds, then both dropout builds.
template void launch_bwd_build<__nv_bfloat16, ATTN_BWD_DQK, ATTN_BWD_DV, false>(const flash::BwdParams&, cudaStream_t);
template void launch_bwd_build<__half, ATTN_BWD_DQK, ATTN_BWD_DV, false>(const flash::BwdParams&, cudaStream_t);
template void launch_bwd<__nv_bfloat16, ATTN_BWD_DQK, ATTN_BWD_DV>(const flash::BwdParams&, bool, cudaStream_t);
template void launch_bwd<__half, ATTN_BWD_DQK, ATTN_BWD_DV>(const flash::BwdParams&, bool, cudaStream_t);

}  // namespace attn::flash_sm80
