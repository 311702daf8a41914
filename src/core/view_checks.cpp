// The view checks validate.cpp and the rotary op share (view_checks.h).
#include "core/view_checks.h"

#include <cstdint>
#include <utility>

#include "attn/error.h"

namespace attn::detail {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

[[noreturn]] void bad_value(std::string what, std::string got, std::string expected, std::string fix) {
  fail(ErrorKind::value, std::move(what), std::move(got), std::move(expected), std::move(fix));
}

}  // namespace

std::string layout_of(QkvFormat f, const char* seq, const char* heads, const char* dim) {
  const std::string s = seq, h = heads, d = dim;
  switch (f) {
    case QkvFormat::bshd: return "[batch, " + s + ", " + h + ", " + d + "]";
    case QkvFormat::sbhd: return "[" + s + ", batch, " + h + ", " + d + "]";
    case QkvFormat::thd: return "[tokens, " + h + ", " + d + "]";
  }
  return "";
}

int rank_of(QkvFormat f) { return f == QkvFormat::thd ? 3 : 4; }

void require_last_dim_contiguous(const TensorView& t, const char* name) {
  if (t.numel() > 0 && t.size(-1) > 1 && t.stride(-1) != 1)  // empty views (DLPack may give stride 0) are fine
    bad_value(std::string(name) + "'s last dimension is not contiguous",
              "stride " + str(t.stride(-1)) + " in shape " + t.shape_str(), "stride 1 along head_dim",
              std::string("make it contiguous (e.g. ") + name + ".contiguous()); other strides may be anything");
}

void require_rank(const TensorView& t, const char* name, QkvFormat f, const std::string& layout) {
  const int want = rank_of(f);
  if (t.rank == want) return;
  std::string fix;
  if (t.rank == want - 1)
    fix = std::string("split the hidden dimension into heads first: ") + name +
          ".view(..., heads, head_dim) so the last two dimensions are heads and head_dim";
  else if (f == QkvFormat::thd && t.rank == 4)
    fix = "a padded [batch, seq, heads, head_dim] batch is qkv_format=\"bshd\"; to pack it, flatten "
          "to [tokens, heads, head_dim] and pass cu_seqlens_q / cu_seqlens_kv";
  else
    fix = std::string("reshape ") + name + " to " + layout + " or pass the qkv_format it is in";
  bad_value(std::string(name) + " has rank " + str(t.rank) + " but qkv_format=" + format_name(f) +
                " needs rank " + str(want),
            t.shape_str(), layout, fix);
}

}  // namespace attn::detail
