// The one table of backends: which exist in this build, which attn knows of,
// and each architecture's preference order.
#include <algorithm>

#include "attn/select.h"
#include "backends/flash_decode/flash_decode.h"
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
  static const std::vector<std::string> names = {"flash_decode", "flash_sm90", "flash_sm80", "cudnn", "unfused",
                                                 "reference"};
  return names;
}

}  // namespace

const std::vector<const Backend*>& registered_backends() {
  static const std::vector<const Backend*> built = {
      &flash_decode::backend(), &flash_sm90::backend(), &flash_sm80::backend(),
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
  else if (dev.sm >= 90 && pass == Pass::backward)
    // cudnn first: its backward is faster than flash_sm90's but where
    // flash_sm90::leads_backward() says otherwise. Each pass is selected on
    // its own (tests/gpu/test_cross_pass.cpp).
    order = {"cudnn", "flash_sm90", "flash_sm80", "unfused"};
  else if (dev.sm >= 90)
    // flash_decode first for the calls it takes (at most 16 query tokens per
    // sequence: decoding reads K/V at the memory's speed, split over the SMs);
    // then flash_sm90: its forward is faster than cuDNN's over the anchors'
    // grid and than FlexAttention on windows and packed documents.
    order = {"flash_decode", "flash_sm90", "cudnn", "flash_sm80", "unfused"};
  else if (dev.sm >= 80 && pass == Pass::forward)
    order = {"flash_decode", "flash_sm80", "cudnn", "unfused"};
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
  // A measured rule of a backend's own (its header says which problems it
  // leads) moves it first.
  if (dev.device.is_cuda() && dev.sm >= 90 && p.pass == Pass::backward && flash_sm90::leads_backward(p, rule)) {
    order.erase(std::find(order.begin(), order.end(), "flash_sm90"));
    order.insert(order.begin(), "flash_sm90");
  }
  return order;
}

}  // namespace attn
