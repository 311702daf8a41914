// Reads flash_sm80's A/B overrides (ab_overrides.h) from the environment.
#include "backends/flash_sm80/ab_overrides.h"

#include <cstdlib>
#include <cstring>

namespace attn::flash_sm80 {

BwdOverrides parse_bwd_overrides(const char* dq, const char* order, const char* group_chunk) {
  BwdOverrides o;
  o.dq_red_only = dq && std::strcmp(dq, "red") == 0;
  if (order && std::strcmp(order, "kv_fastest") == 0) o.order = BwdOrder::kv_fastest;
  if (order && std::strcmp(order, "kv_slowest") == 0) o.order = BwdOrder::kv_slowest;
  if (group_chunk) {
    const int n = std::atoi(group_chunk);
    o.group_chunk = n < 1 ? 1 : n;
  }
  return o;
}

const BwdOverrides& bwd_overrides() {
  static const BwdOverrides o = parse_bwd_overrides(
      std::getenv("ATTN_SM80_BWD_DQ"), std::getenv("ATTN_SM80_BWD_ORDER"), std::getenv("ATTN_SM80_BWD_GROUP_CHUNK"));
  return o;
}

}  // namespace attn::flash_sm80
