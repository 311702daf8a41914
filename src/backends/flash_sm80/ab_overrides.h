// flash_sm80's A/B overrides: environment variables that force one of the
// backward's launch-time choices, so that one build can be timed both ways
// (A/B runs on the device machine, docs/DEVICE.md). They exist for
// measurement only; unset, every choice follows its rule. Host only.
//
//   ATTN_SM80_BWD_DQ=red         dQ by red.global adds from registers, never
//                                by bulk reduce-adds (bwd_dq.cuh).
//   ATTN_SM80_BWD_ORDER=kv_fastest|kv_slowest
//                                the grid's order, on the rows whose tuning
//                                has kv_order_chosen (bwd_config.h); the other
//                                rows keep (KV tiles, h_kv, batch).
//   ATTN_SM80_BWD_GROUP_CHUNK=N  the chunked grid's (KV head, sequence) pairs
//                                per chunk, held to what the grid takes
//                                (bwd_clamp_group_chunk(); below 1 reads as 1).
// Other values leave the choice to its rule.
#pragma once

namespace attn::flash_sm80 {

enum class BwdOrder { rule, kv_fastest, kv_slowest };

struct BwdOverrides {
  bool dq_red_only = false;         // ATTN_SM80_BWD_DQ=red
  BwdOrder order = BwdOrder::rule;  // ATTN_SM80_BWD_ORDER
  int group_chunk = 0;              // ATTN_SM80_BWD_GROUP_CHUNK; 0: unset (the rule)
};

// The overrides that these values (null: unset) name.
BwdOverrides parse_bwd_overrides(const char* dq, const char* order, const char* group_chunk);

// This process's overrides, read from the environment once, at the first call.
const BwdOverrides& bwd_overrides();

}  // namespace attn::flash_sm80
