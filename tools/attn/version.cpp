// `attn --version`: what this build is and what it runs with.
#include <cstdio>
#include <string>

#include "attn/build_info.h"
#include "commands.h"

namespace attn::cli {

int version_command() {
  const BuildInfo b = build_info();
  std::string backends;
  for (const std::string& name : b.backends) backends += (backends.empty() ? "" : ", ") + name;
  std::printf("attn %s\n", b.version.c_str());
  std::printf("commit:   %s\n", b.commit.c_str());
  std::printf("cuda:     toolkit %s, runtime %s, driver %s\n", cuda_version_string(b.cuda_toolkit).c_str(),
              b.cuda_runtime ? cuda_version_string(b.cuda_runtime).c_str() : "unknown",
              b.cuda_driver ? cuda_version_string(b.cuda_driver).c_str() : "none (no NVIDIA driver)");
  std::printf("cudnn:    %s\n", b.cudnn ? cudnn_version_string(b.cudnn).c_str() : "not built (no cudnn backend)");
  std::printf("backends: %s\n", backends.c_str());
  return 0;
}

}  // namespace attn::cli
