// Each pass is selected on its own (the first backend in the device's order
// that supports it), so a training step can run one backend's forward and
// another's backward on that forward's out and lse: on Hopper, flash_sm90's
// forward (it has no backward) and cudnn's backward. DESIGN.md's lse is the
// contract between them. Every ordered pair of GPU backends that claims a grid
// case runs it that way and must match the fp64 reference, and so must the
// automatic choice of both passes.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "gpu/backend_grid.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"

namespace attn {
namespace {

using testing::Case;
using testing::CaseSpec;

// The reference's out, lse and gradients for the grid case's inputs.
Case reference_of(const CaseSpec& spec, uint64_t seed) {
  Case ref = testing::copy_inputs_to(testing::make_case(spec, Device::cuda(0), seed), Device::cpu(), DType::f64);
  testing::run_forced(ref, "reference");
  return ref;
}

TEST(CrossPass, EveryForwardWithEveryOtherBackward) {
  ATTN_REQUIRE_GPU();
  const std::vector<std::string> backends = testing::gpu_backends();
  std::map<std::string, int> ran;
  int index = 0;
  for (const CaseSpec& spec : testing::backend_grid()) {
    ++index;
    if (!spec.backward) continue;
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const std::string& f : backends)
      for (const std::string& b : backends) {
        if (f == b || !testing::claims(f, spec, Pass::forward) || !testing::claims(b, spec, Pass::backward)) continue;
        // Both passes must draw the same dropout pattern: attn's (cudnn draws its own).
        if (spec.dropout_p > 0 && !(find_backend(f)->matches_reference_dropout() &&
                                    find_backend(b)->matches_reference_dropout()))
          continue;
        pairs.emplace_back(f, b);
      }
    if (pairs.empty()) continue;
    const uint64_t seed = 7000 + index;
    const Case ref = reference_of(spec, seed);
    for (const auto& [f, b] : pairs) {
      SCOPED_TRACE("grid case " + std::to_string(index - 1) + ": " + f + " forward, " + b + " backward; " +
                   describe_problem(testing::problem_of(spec, Pass::backward, Device::cuda(0))));
      Case gpu = testing::make_case(spec, Device::cuda(0), seed);
      forward(gpu.opts, gpu.fwd, {}, testing::forcing(f));
      backward(gpu.opts, gpu.bwd, {}, testing::forcing(b));
      ATTN_CUDA_OK(cudaDeviceSynchronize());
      testing::expect_outputs_match(gpu, ref);
      ++ran[f + " > " + b];
    }
  }
  if (backends.size() >= 2) EXPECT_FALSE(ran.empty()) << "no pair of backends claimed a grid case";
  for (const auto& [pair, n] : ran) std::printf("forward > backward %s: %d grid cases\n", pair.c_str(), n);
}

TEST(CrossPass, AutomaticChoiceOfBothPasses) {
  ATTN_REQUIRE_GPU();
  std::map<std::string, int> ran;
  int index = 0;
  for (const CaseSpec& spec : testing::backend_grid()) {
    ++index;
    if (!spec.backward) continue;
    const uint64_t seed = 9000 + index;
    Case gpu = testing::make_case(spec, Device::cuda(0), seed);
    const Policy automatic;  // no ATTN_BACKEND / ATTN_DISABLE: what a caller gets
    const Selection f = forward(gpu.opts, gpu.fwd, {}, automatic);
    const Selection b = backward(gpu.opts, gpu.bwd, {}, automatic);
    ATTN_CUDA_OK(cudaDeviceSynchronize());
    SCOPED_TRACE("grid case " + std::to_string(index - 1) + ": " + f.backend->name() + " forward, " +
                 b.backend->name() + " backward");
    testing::expect_outputs_match(gpu, reference_of(spec, seed));
    ++ran[std::string(f.backend->name()) + " > " + b.backend->name()];
  }
  EXPECT_FALSE(ran.empty());
  for (const auto& [pair, n] : ran) std::printf("automatic forward > backward %s: %d grid cases\n", pair.c_str(), n);
}

}  // namespace
}  // namespace attn
