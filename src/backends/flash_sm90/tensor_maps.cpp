// See tensor_maps.h.
#include "backends/flash_sm90/tensor_maps.h"

#include "backends/flash/params_build.h"
#include "kernels/sm90/tma_map.h"

namespace attn::flash_sm90 {

CUtensorMap tile_map(const Problem& p, const TensorView& t, int64_t tokens, int64_t heads, int64_t cols,
                     int box_rows, const char* name) {
  const flash::Strides st = flash::strides_of(t, p.qkv_format);
  const bool packed = p.qkv_format == QkvFormat::thd;
  sm90::TileMapShape s;
  s.base = t.data;
  s.bf16 = p.dtype == DType::bf16;
  s.cols = cols;
  s.tokens = tokens;
  s.heads = heads;
  s.sequences = packed ? 1 : p.batch;
  s.token_stride = st.row;
  s.head_stride = st.head;
  s.sequence_stride = st.batch;
  s.box_rows = box_rows;
  return sm90::make_tile_map(s, name);
}

}  // namespace attn::flash_sm90
