// Shared by the GPU tests (see gpu_test_util.h).
#include "gpu/gpu_test_util.h"

#include "attn/backend.h"

namespace attn::testing {

bool have_gpu() { return cuda_device_count() > 0; }

}  // namespace attn::testing
