// Builds TMA tensor maps through the driver's cuTensorMapEncodeTiled.
#include "kernels/sm90/tma_map.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "attn/error.h"

namespace attn::sm90 {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encoder() {
  static EncodeTiled fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(f);
  });
  if (!fn)
    fail(ErrorKind::runtime, "the CUDA driver has no cuTensorMapEncodeTiled (TMA)", "a driver without it",
         "a CUDA 12+ driver", "update the NVIDIA driver, or force another backend (ATTN_BACKEND=cudnn)");
  return fn;
}

}  // namespace

CUtensorMap make_tile_map(const TileMapShape& s, const char* tensor_name) {
  CUtensorMap map;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(s.cols), static_cast<cuuint64_t>(s.tokens),
                              static_cast<cuuint64_t>(s.heads), static_cast<cuuint64_t>(s.sequences)};
  // A dimension of extent 1 is never stepped; TMA still wants a legal stride there.
  // A zero stride (a broadcast view) would need a copy: refused below like any
  // stride the driver rejects.
  auto stride = [&](int64_t elems, int64_t extent) {
    return static_cast<cuuint64_t>((extent == 1 ? s.token_stride : elems) * 2);
  };
  const cuuint64_t strides[3] = {stride(s.token_stride, s.tokens), stride(s.head_stride, s.heads),
                                 stride(s.sequence_stride, s.sequences)};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(s.box_rows), 1, 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  bool zero = false;
  for (int i = 0; i < 3; ++i) zero = zero || strides[i] == 0;
  const CUresult r = zero ? CUDA_ERROR_INVALID_VALUE : encoder()(&map, s.bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                               const_cast<void*>(s.base), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    fail(ErrorKind::value, std::string("flash_sm90 cannot describe ") + tensor_name + " to TMA",
         "strides (elements) token " + std::to_string(s.token_stride) + ", head " + std::to_string(s.head_stride) +
             ", sequence " + std::to_string(s.sequence_stride) + " (CUresult " + std::to_string(r) + ")",
         "non-zero strides that are multiples of 16 bytes and a 16-byte aligned base",
         "pass a contiguous tensor (.contiguous()), or force another backend (backend=\"cudnn\" or \"flash_sm80\")");
  return map;
}

}  // namespace attn::sm90
