// The one table of backends: which exist in this build, which attn knows of,
// and each architecture's preference order.
#include <algorithm>

#include "attn/select.h"
#include "backends/flash_sm80/bwd_config.h"  // bwd_first_kv_tiles_heavy: the case the chunked grid serves
#include "backends/flash_sm80/flash_sm80.h"
#include "backends/flash_sm90/flash_sm90.h"
#include "backends/reference/reference.h"
#include "backends/unfused/unfused.h"
#ifdef ATTN_HAVE_CUDNN
#include "backends/cudnn/cudnn.h"
#endif

namespace attn {
namespace {

// Every backend of DESIGN.md, built or not, so verdicts always cover all of them.
const std::vector<std::string>& known_backends() {
  static const std::vector<std::string> names = {"flash_sm90", "flash_sm80", "cudnn", "unfused",
                                                 "reference"};
  return names;
}

}  // namespace

const std::vector<const Backend*>& registered_backends() {
  static const std::vector<const Backend*> built = {
      &flash_sm90::backend(), &flash_sm80::backend(),
#ifdef ATTN_HAVE_CUDNN
      &cudnn::backend(),
#endif
      &unfused::backend(), &reference::backend()};
  return built;
}

const Backend* find_backend(const std::string& name) {
  for (const Backend* b : registered_backends())
    if (name == b->name()) return b;
  return nullptr;
}

std::vector<std::string> preference_order(const DeviceInfo& dev, Pass pass) {
  std::vector<std::string> order;
  if (!dev.device.is_cuda())
    order = {"reference"};
  else if (dev.sm >= 90 && pass == Pass::backward)  // cudnn first: flash_sm90's backward is 0.92-1.01x cuDNN's
                                                    // at d 128 without GQA, 0.71-0.84x at d 64 (docs/PERF.md,
                                                    // "flash_sm90 backward"; the rule below is the exception);
                                                    // each pass is selected on its own
                                                    // (tests/gpu/test_cross_pass.cpp)
    order = {"cudnn", "flash_sm90", "flash_sm80", "unfused"};
  else if (dev.sm >= 90)  // flash_sm90 first: its forward is 1.04x cuDNN's over ANCHORS.md's grid (no point
                          // below 0.929x) and 1.5-1.7x FlexAttention on windows and packed documents (docs/PERF.md,
                          // v18), so a training step runs its forward and cudnn's backward.
    order = {"flash_sm90", "cudnn", "flash_sm80", "unfused"};
  else if (dev.sm >= 80)
    order = {"flash_sm80", "cudnn", "unfused"};
  else
    order = {"unfused"};
  for (const std::string& name : known_backends())  // the rest, so every verdict is listed
    if (std::find(order.begin(), order.end(), name) == order.end()) order.push_back(name);
  return order;
}

std::vector<std::string> preference_order_for(const DeviceInfo& dev, const Problem& p, std::string* rule) {
  std::vector<std::string> order = preference_order(dev, p.pass);
  // Hopper's backward at head dim 128 under a causal mask (a right bound, no
  // left one) with 4 or more query heads per KV head: flash_sm90's backward
  // runs its heavy first KV tiles of several heads together (its chunked
  // grid) and measured 1.02-1.09x cuDNN's with GQA 4 (docs/PERF.md), where
  // cuDNN also sums dK and dV over the group in extra kernels. (At d 64 it
  // measured 0.85-1.05x there, causal: not moved.)
  const int64_t h_per_kv = p.h_kv > 0 ? p.h_q / p.h_kv : 0;
  const bool causal_gqa = p.d_qk == 128 && p.d_v == 128 && h_per_kv >= 4 &&
                          flash_sm80::bwd_first_kv_tiles_heavy(static_cast<int>(h_per_kv), p.window_left,
                                                               p.window_right);
  if (dev.device.is_cuda() && dev.sm >= 90 && p.pass == Pass::backward && causal_gqa) {
    order.erase(std::find(order.begin(), order.end(), "flash_sm90"));
    order.insert(order.begin(), "flash_sm90");
    if (rule) *rule = "flash_sm90 first for a causal GQA backward at d 128 (4+ query heads per KV head)";
  }
  return order;
}

}  // namespace attn
