// Facts about this build of attn and the libraries it runs with, for
// `attn --version` and benchmark records.
#pragma once

#include <string>
#include <vector>

namespace attn {

struct BuildInfo {
  std::string version;                // "0.1.0"
  std::string commit;                 // git commit the library was built from
  int cuda_toolkit = 0;               // CUDART_VERSION at build time, e.g. 13000
  int cuda_runtime = 0;               // cudaRuntimeGetVersion(), 0 if it failed
  int cuda_driver = 0;                // cudaDriverGetVersion(), 0 without a driver
  int cudnn = 0;                      // cudnnGetVersion(), e.g. 91900; 0: built without cudnn
  std::vector<std::string> backends;  // registered_backends(), in table order
};

BuildInfo build_info();

// "13.0" for 13000 (CUDA's encoding); "9.19.0" for 91900 (cuDNN 9's).
std::string cuda_version_string(int v);
std::string cudnn_version_string(int v);

}  // namespace attn
