// What this build holds and what it runs with (include/attn/build_info.h).
#include "attn/build_info.h"

#include <cuda_runtime.h>

#include "attn/attn.h"
#include "attn/select.h"
#ifdef ATTN_HAVE_CUDNN
#include "backends/cudnn/cudnn.h"
#endif

namespace attn {

BuildInfo build_info() {
  BuildInfo b;
  b.version = version();
  b.commit = git_commit();
  b.cuda_toolkit = CUDART_VERSION;
  if (cudaRuntimeGetVersion(&b.cuda_runtime) != cudaSuccess) b.cuda_runtime = 0;
  if (cudaDriverGetVersion(&b.cuda_driver) != cudaSuccess) b.cuda_driver = 0;
#ifdef ATTN_HAVE_CUDNN
  b.cudnn = cudnn::library_version();
#endif
  for (const Backend* be : registered_backends()) b.backends.push_back(be->name());
  return b;
}

std::string cuda_version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

std::string cudnn_version_string(int v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace attn
