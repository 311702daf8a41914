// The problem as JSON fields, shared by run --json, check --json and bench.
#include "attn/attn.h"
#include "commands.h"
#include "json.h"

namespace attn::cli {

std::string problem_json(const testing::CaseSpec& s) {
  auto ints = [](const std::vector<int64_t>& v) {
    std::vector<std::string> items;
    for (int64_t x : v) items.push_back(json::integer(x));
    return json::array(items);
  };
  json::Object o;
  o.str("format", format_name(s.format)).integer("batch", s.batch);
  if (!s.seqlens_q.empty()) o.raw("seqlens_q", ints(s.seqlens_q));
  if (!s.seqlens_kv.empty()) o.raw("seqlens_kv", ints(s.seqlens_kv));
  o.integer("s_q", s.s_q).integer("s_kv", s.s_kv).integer("h_q", s.h_q).integer("h_kv", s.h_kv);
  o.integer("d_qk", s.d_qk).integer("d_v", s.d_v).str("dtype", dtype_name(s.dtype)).str("mask", mask_name(s.mask));
  o.raw("window", ints({s.window.left, s.window.right}));
  o.raw("scale", s.softmax_scale ? json::num(*s.softmax_scale) : "null");
  o.num("softcap", s.softcap).str("bias", bias_name(s.bias)).num("dropout", s.dropout_p);
  o.raw("seed", std::to_string(s.seed)).raw("offset", std::to_string(s.offset)).boolean("backward", s.backward);
  o.raw("visible_pairs", testing::decimal(testing::visible_pairs_wide(s)))
      .count("forward_flops", testing::forward_flops(s));
  if (s.backward) o.count("backward_flops", testing::backward_flops(s));
  return o.dump();
}

}  // namespace attn::cli
