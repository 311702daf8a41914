// attn::rotary: checks the views, resolves them into RotaryParams, then runs
// the CUDA kernel or the CPU loop (float64 math, the tests' reference).
#include "attn/rotary.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "attn/error.h"
#include "core/cuda_check.h"
#include "core/numeric.h"
#include "core/view_checks.h"
#include "rotary/rotary_params.h"

namespace attn {
namespace {

using rotary_detail::PositionAxis;
using rotary_detail::RotaryParams;

constexpr const char* kFix = "pass TE's angles, RotaryPositionEmbedding(dim)(max_seq_len), and x as [s, b, h, d], "
                             "[b, s, h, d] or [t, h, d] with a contiguous last dimension";

[[noreturn]] void bad(ErrorKind kind, const std::string& what, const std::string& got, const std::string& expected,
                      const std::string& fix = kFix) {
  fail(kind, "rotary: " + what, got, expected, fix);
}

RotaryParams resolve(const RotaryArgs& a) {
  const TensorView& x = a.x;
  detail::require_rank(x, "x", a.format, detail::layout_of(a.format, "seq", "heads", "head_dim"));
  const bool gpu = x.device.is_cuda();
  const bool dtype_ok = x.dtype == DType::f32 || x.dtype == DType::f16 || x.dtype == DType::bf16 ||
                        (!gpu && x.dtype == DType::f64);
  if (!dtype_ok)
    bad(ErrorKind::type, "x has an unsupported dtype", dtype_name(x.dtype),
        gpu ? "float32, float16 or bfloat16" : "float32, float16, bfloat16 or float64", "convert x first");
  const TensorView& o = a.out;
  if (o.rank != x.rank || !std::equal(x.shape.begin(), x.shape.begin() + x.rank, o.shape.begin()) ||
      o.dtype != x.dtype || !(o.device == x.device))
    bad(ErrorKind::value, "out does not match x",
        o.shape_str() + " " + dtype_name(o.dtype) + " on " + device_name(o.device),
        x.shape_str() + " " + dtype_name(x.dtype) + " on " + device_name(x.device), "allocate out like x");
  const int64_t d = x.size(-1);
  detail::require_last_dim_contiguous(x, "x");
  detail::require_last_dim_contiguous(o, "out");

  const TensorView& f = a.freqs;
  const bool te_shape = f.rank == 4 && f.shape[1] == 1 && f.shape[2] == 1;
  if (!(te_shape || f.rank == 2) || f.dtype != DType::f32)
    bad(ErrorKind::value, "freqs must be float32 angles [max_s, 1, 1, r] or [max_s, r]",
        f.shape_str() + " " + dtype_name(f.dtype), "float32 [max_s, 1, 1, r]");
  const int64_t r = f.size(-1);
  if (r % 2 != 0 || r > d || r == 0)
    bad(ErrorKind::value, "freqs rotate " + std::to_string(r) + " channels; that must be even, above 0, and at "
        "most x's " + std::to_string(d), f.shape_str(), "[max_s, 1, 1, r] with r even, 0 < r <= " + std::to_string(d));
  if (r > 1 && f.stride(-1) != 1)
    bad(ErrorKind::value, "freqs' last dimension must be contiguous", std::to_string(f.stride(-1)), "stride 1",
        "freqs.contiguous()");
  if (!(f.device == x.device))
    bad(ErrorKind::value, "freqs are on another device than x", device_name(f.device), device_name(x.device),
        "move freqs to x's device");
  if (r > 4096)  // the kernel keeps each token's cos and sin in 32 KiB of shared memory
    bad(ErrorKind::value, "more than 4096 rotated channels", std::to_string(r), "r <= 4096",
        "rotate fewer channels");

  RotaryParams p;
  p.x = x.data;
  p.out = o.data;
  p.dtype = x.dtype;
  p.heads = static_cast<int>(x.size(-2));
  p.d = static_cast<int>(d);
  p.half = static_cast<int>(r / 2);
  p.freqs = f.as<const float>();
  p.f_stride = f.stride(0);
  p.max_s = f.size(0);
  p.backward = a.backward;
  p.n0 = x.size(0);
  p.x_s0 = x.stride(0);
  p.o_s0 = o.stride(0);
  p.x_sh = x.stride(-2);
  p.o_sh = o.stride(-2);
  if (a.format == QkvFormat::thd) {
    const TensorView& cu = a.cu_seqlens;
    if (!cu.defined() || cu.rank != 1 || cu.dtype != DType::i32 || cu.size(0) < 1 || !(cu.device == x.device) ||
        (cu.size(0) > 1 && cu.stride(0) != 1))
      bad(ErrorKind::value, "format thd needs cu_seqlens, contiguous int32 [batch + 1] on x's device",
          cu.defined() ? cu.shape_str() + " " + dtype_name(cu.dtype) + " on " + device_name(cu.device) : "none",
          "int32 [batch + 1]", "pass the cu_seqlens the attention call uses");
    p.axis = PositionAxis::packed;
    p.cu_seqlens = cu.as<const int32_t>();
    p.n_seqs = cu.size(0) - 1;
  } else {
    p.n1 = x.size(1);
    p.x_s1 = x.stride(1);
    p.o_s1 = o.stride(1);
    p.axis = a.format == QkvFormat::sbhd ? PositionAxis::dim0 : PositionAxis::dim1;
    const int64_t seq = a.format == QkvFormat::sbhd ? p.n0 : p.n1;
    if (seq > p.max_s)
      bad(ErrorKind::value, "freqs cover " + std::to_string(p.max_s) + " positions, the sequence has " +
          std::to_string(seq), f.shape_str(), "[>= " + std::to_string(seq) + ", 1, 1, r]",
          "RotaryPositionEmbedding(dim)(" + std::to_string(seq) + ") or longer");
  }
  return p;
}

void run_cpu(const RotaryParams& p) {
  using detail::load_as_double;
  using detail::store_from_double;
  for (int64_t i0 = 0; i0 < p.n0; ++i0)
    for (int64_t i1 = 0; i1 < p.n1; ++i1) {
      const int64_t pos = rotary_detail::token_position(p, i0, i1);
      const float* angles = pos >= 0 && pos < p.max_s ? p.freqs + pos * p.f_stride : nullptr;
      for (int h = 0; h < p.heads; ++h) {
        const int64_t xb = i0 * p.x_s0 + i1 * p.x_s1 + h * p.x_sh, ob = i0 * p.o_s0 + i1 * p.o_s1 + h * p.o_sh;
        for (int c = 0; c < p.half; ++c) {
          const double x_i = load_as_double(p.x, p.dtype, xb + c), x_j = load_as_double(p.x, p.dtype, xb + c + p.half);
          double o_i = x_i, o_j = x_j;
          if (pos >= p.max_s) {
            o_i = o_j = std::numeric_limits<double>::quiet_NaN();
          } else if (angles) {
            const double a_i = angles[c], a_j = angles[c + p.half];
            rotary_detail::rotate_pair(p.backward, std::cos(a_i), std::sin(a_i), std::cos(a_j), std::sin(a_j), x_i,
                                       x_j, o_i, o_j);
          }
          store_from_double(p.out, p.dtype, ob + c, o_i);
          store_from_double(p.out, p.dtype, ob + c + p.half, o_j);
        }
        for (int c = 2 * p.half; c < p.d; ++c)
          store_from_double(p.out, p.dtype, ob + c, load_as_double(p.x, p.dtype, xb + c));
      }
    }
}

}  // namespace

void rotary(const RotaryArgs& args) {
  const RotaryParams p = resolve(args);
  if (p.n0 == 0 || p.n1 == 0 || p.heads == 0) return;
  if (args.x.device.is_cuda()) {
    ATTN_CUDA(cudaSetDevice(args.x.device.index));
    rotary_detail::launch_rotary(p, args.stream);
  } else {
    run_cpu(p);
  }
}

}  // namespace attn
