// Shared by the GPU tests (see gpu_test_util.h).
#include "gpu/gpu_test_util.h"

#include "attn/backend.h"
#include "attn/select.h"

namespace attn::testing {

bool have_gpu() { return cuda_device_count() > 0; }

std::vector<std::string> gpu_backends() {
  std::vector<std::string> names;
  for (const Backend* b : registered_backends())
    if (std::string(b->name()) != "reference") names.push_back(b->name());
  return names;
}

}  // namespace attn::testing
