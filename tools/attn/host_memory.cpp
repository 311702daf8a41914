// Host-memory estimates for run and check (see host_memory.h). The figures
// follow testing::make_case and copy_inputs_to: each tensor is filled through a
// vector of doubles plus a byte copy, and check keeps fp64 copies beside the
// inputs for the reference and the finite differences.
#include "host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "attn/error.h"

namespace attn::cli {
namespace {

using testing::CaseSpec;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

int64_t mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kMax : r;
}
int64_t add(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? kMax : r;
}
int64_t mul(std::initializer_list<int64_t> xs) {
  int64_t r = 1;
  for (int64_t x : xs) r = mul(r, std::max<int64_t>(x, 0));
  return r;
}

// Elements of the q-like tensors: thd packs tokens, bshd/sbhd pad to rows.
int64_t q_tokens(const CaseSpec& s) {
  return s.format == QkvFormat::thd ? testing::tokens_q(s) : mul(s.batch, testing::rows_q(s));
}
int64_t kv_tokens(const CaseSpec& s) {
  return s.format == QkvFormat::thd ? testing::tokens_kv(s) : mul(s.batch, testing::rows_kv(s));
}

// The largest single tensor, whose fill needs 8 bytes per element (doubles)
// plus its own size again (the byte copy) on top of the tensors.
int64_t largest_elems(const CaseSpec& s) {
  int64_t m = std::max(
      {mul({q_tokens(s), s.h_q, std::max(s.d_qk, s.d_v)}), mul({kv_tokens(s), s.h_kv, std::max(s.d_qk, s.d_v)})});
  if (s.bias == BiasType::post_scale_bias || s.mask == MaskType::arbitrary)
    m = std::max(m, mul({s.batch, s.h_q, testing::rows_q(s), testing::rows_kv(s)}));
  return m;
}

// The reference's per-thread scratch: a row of scores and the k/v rows of one
// sequence as doubles (twice in the backward, which also accumulates dk/dv).
int64_t reference_scratch(const CaseSpec& s) {
  const int64_t threads = std::max<unsigned>(std::thread::hardware_concurrency(), 1u);
  const int64_t per = mul({testing::rows_kv(s), add(add(s.d_qk, s.d_v), 2), 8, s.backward ? 2 : 1});
  return mul(threads, per);
}

std::string gib(int64_t bytes) {
  std::ostringstream os;
  os.precision(3);
  os << static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0) << " GiB";
  return os.str();
}

}  // namespace

int64_t case_bytes(const CaseSpec& s, DType dtype) {
  const int64_t e = static_cast<int64_t>(dtype_size_bytes(dtype));
  const int64_t q = mul({q_tokens(s), s.h_q, s.d_qk, e}), out = mul({q_tokens(s), s.h_q, s.d_v, e});
  const int64_t k = mul({kv_tokens(s), s.h_kv, s.d_qk, e}), v = mul({kv_tokens(s), s.h_kv, s.d_v, e});
  const int64_t lse = mul({q_tokens(s), s.h_q, 4});
  int64_t total = add(add(add(q, k), add(v, out)), lse);
  int64_t bias = 0;
  if (s.bias == BiasType::post_scale_bias) {
    const int64_t full[4] = {s.batch, s.h_q, testing::rows_q(s), testing::rows_kv(s)};
    bias = e;
    for (int d = 0; d < 4; ++d) bias = mul(bias, s.bias_shape[d] == 0 ? full[d] : s.bias_shape[d]);
    total = add(total, bias);
  }
  if (s.mask == MaskType::arbitrary) total = add(total, mul({s.batch, testing::rows_q(s), testing::rows_kv(s)}));
  if (s.backward) total = add(total, add(add(out, q), add(add(k, v), bias)));  // dout, dq, dk, dv, dbias
  return total;
}

int64_t run_host_bytes(const CaseSpec& s, bool on_cpu) {
  const int64_t staging = mul(largest_elems(s), 8 + 8);  // doubles + byte copy, at most 8 bytes an element
  return on_cpu ? add(add(case_bytes(s, s.dtype), staging), reference_scratch(s)) : staging;
}

int64_t check_host_bytes(const CaseSpec& s) {
  // The inputs, their fp64 copy for the reference and one more for the finite
  // differences (or a backend's own copy), plus staging and scratch.
  const int64_t f64 = case_bytes(s, DType::f64);
  return add(add(case_bytes(s, s.dtype), mul(f64, 2)), add(mul(largest_elems(s), 16), reference_scratch(s)));
}

int64_t available_host_bytes() {
  std::ifstream in("/proc/meminfo");
  // Line by line: some lines (HugePages_Total) have no unit.
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return mul(kib, 1024);
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? mul(pages, page) : -1;
}

void require_host_memory(const std::string& command, int64_t needed) {
  const int64_t available = available_host_bytes();
  if (available < 0 || needed <= available) return;
  const std::string got =
      needed == kMax ? std::string("more than 2^63 bytes") : std::to_string(needed) + " bytes (" + gib(needed) + ")";
  fail(ErrorKind::runtime, "not enough host memory for `" + command + "` on this problem", got,
       "at most " + std::to_string(available) + " bytes (" + gib(available) + ", MemAvailable)",
       "shrink the problem (--batch, --seqlen, --heads, --head-dim); `attn explain` answers shape-only questions "
       "without allocating");
}

}  // namespace attn::cli
