// The shared GPU test grid: every GPU backend in the build runs every grid case
// it claims, on fresh random inputs with poisoned outputs, and must match the
// fp64 CPU reference within DESIGN.md's tolerances. A new backend joins by
// being registered (src/select/registry.cpp), not by copying tests.
#include <string>
#include <vector>

#include "attn/attn.h"
#include "gpu/backend_grid.h"
#include "gpu/gpu_test_util.h"
#include "testing/case.h"
#include "testing/compare.h"

namespace attn {
namespace testing {

std::vector<CaseSpec> backend_grid() {
  std::vector<CaseSpec> cases;
  auto add = [&](CaseSpec s) { cases.push_back(s); };
  const MaskType masks[] = {MaskType::no_mask, MaskType::causal, MaskType::causal_bottom_right,
                            MaskType::padding, MaskType::padding_causal, MaskType::padding_causal_bottom_right};
  // Every format x mask, s_q != s_kv both ways, GQA 2, lengths that are not tile multiples.
  for (QkvFormat f : {QkvFormat::bshd, QkvFormat::sbhd, QkvFormat::thd})
    for (MaskType m : masks)
      for (auto [sq, skv] : {std::pair<int64_t, int64_t>{77, 133}, {133, 77}}) {
        CaseSpec s;
        s.format = f;
        s.mask = m;
        s.batch = 2;
        s.s_q = sq;
        s.s_kv = skv;
        s.h_q = 4;
        s.h_kv = 2;
        s.d_qk = s.d_v = 64;
        const bool padded = m == MaskType::padding || m == MaskType::padding_causal ||
                            m == MaskType::padding_causal_bottom_right;
        if (f == QkvFormat::thd) {
          s.seqlens_q = {sq, 0, 1, sq / 2};  // an empty sequence and a length-1 one
          s.seqlens_kv = {skv, 5, 0, skv};   // and one whose queries see no key
          s.batch = 4;
        } else if (padded) {
          s.seqlens_q = {sq, sq / 3};
          s.seqlens_kv = {skv / 2, skv};
        }
        s.backward = true;
        add(s);
      }
  // Windows at their boundaries, both alignments.
  for (auto [l, r] : {std::pair<int64_t, int64_t>{0, 0}, {1, 0}, {63, 0}, {64, 0}, {0, 64}, {64, 64}, {-1, 3}})
    for (MaskType m : {MaskType::no_mask, MaskType::causal}) {
      CaseSpec s;
      s.mask = m;
      s.window = {l, r};
      s.batch = 1;
      s.s_q = 150;
      s.s_kv = 200;
      s.h_q = s.h_kv = 2;
      s.backward = true;
      add(s);
    }
  // GQA ratios 1 / 2 / 8 and head dims 32..256, 192/128, in each dtype.
  for (int64_t g : {1, 2, 8})
    for (auto [dqk, dv] : {std::pair<int64_t, int64_t>{32, 32}, {64, 64}, {96, 96}, {128, 128}, {160, 160},
                           {192, 128}, {256, 256}})
      for (DType t : {DType::bf16, DType::f16, DType::f32}) {
        CaseSpec s;
        s.dtype = t;
        s.mask = MaskType::causal;
        s.batch = 2;
        s.s_q = s.s_kv = 65;
        s.h_kv = 1;
        s.h_q = g;
        s.d_qk = dqk;
        s.d_v = dv;
        s.backward = true;
        add(s);
      }
  // Length 1 on either side, fully masked rows (bottom-right causal with s_q > s_kv).
  for (auto [sq, skv] : {std::pair<int64_t, int64_t>{1, 1}, {1, 300}, {300, 1}, {40, 10}}) {
    CaseSpec s;
    s.mask = MaskType::causal_bottom_right;
    s.s_q = sq;
    s.s_kv = skv;
    s.h_q = 4;
    s.h_kv = 1;
    s.backward = true;
    add(s);
  }
  // Several query and KV tiles of a tiled kernel (128 x 64..128): windows that
  // skip whole tiles, dropout and score changes across tile boundaries, decode.
  {
    CaseSpec s;
    s.batch = 2;
    s.s_q = s.s_kv = 700;
    s.h_q = 4;
    s.h_kv = 2;
    s.d_qk = s.d_v = 128;
    s.window = {130, 20};
    s.backward = true;
    add(s);
    s.window = {};
    s.mask = MaskType::causal;
    s.d_qk = s.d_v = 64;
    s.s_q = s.s_kv = 513;
    s.dropout_p = 0.1;
    s.seed = 99;
    s.offset = 3;
    add(s);
    s.dropout_p = 0.0;
    s.dtype = DType::f16;
    s.d_qk = s.d_v = 128;
    s.s_q = 300;
    s.s_kv = 420;
    s.mask = MaskType::causal_bottom_right;
    s.window = {200, 0};
    s.softcap = 20.0;
    s.bias = BiasType::alibi;
    add(s);
    CaseSpec t;
    t.format = QkvFormat::thd;
    t.mask = MaskType::padding_causal_bottom_right;
    t.batch = 3;
    t.seqlens_q = {200, 0, 517};
    t.seqlens_kv = {300, 3, 517};
    t.h_q = 3;
    t.h_kv = 1;
    t.d_qk = t.d_v = 96;
    t.backward = true;
    add(t);
    CaseSpec d;  // decode: one query against a long cache, windowed
    d.batch = 3;
    d.s_q = 1;
    d.s_kv = 1000;
    d.h_q = 8;
    d.h_kv = 2;
    d.d_qk = d.d_v = 128;
    d.mask = MaskType::causal_bottom_right;
    d.window = {300, 0};
    d.backward = true;
    add(d);
  }
  // A tiled backward (one CTA per KV tile walking the query tiles that see it,
  // dQ added across KV tiles): causal and window tile skipping over many
  // tiles, GQA 8 (dK, dV summed over a group), dropout across tiles with
  // s_q != s_kv (d 128) and with a window (d 256), d 256 (with and without a
  // mask) and 192/128 over several tiles, fully masked rows in a multi-tile
  // bottom-right problem, a padded batch, every score change.
  {
    CaseSpec s;
    s.batch = 2;
    s.s_q = s.s_kv = 600;
    s.h_q = 8;
    s.h_kv = 1;
    s.mask = MaskType::causal;
    s.backward = true;
    add(s);
    s.h_q = 4;
    s.h_kv = 2;
    s.mask = MaskType::no_mask;
    s.s_q = 200;
    s.s_kv = 333;
    s.d_qk = s.d_v = 128;
    s.dropout_p = 0.2;
    s.seed = 42;
    s.offset = 9;
    add(s);
    s.dropout_p = 0.0;
    s.s_q = s.s_kv = 300;
    s.d_qk = s.d_v = 256;
    s.mask = MaskType::causal;
    add(s);
    s.dropout_p = 0.15;  // d 256's dropout build (its main build has no dropout path)
    s.seed = 5;
    s.window = {90, 0};
    add(s);
    s.dropout_p = 0.0;
    s.window = {};
    s.mask = MaskType::no_mask;
    s.s_q = 200;
    s.s_kv = 260;
    add(s);  // d 256 without a mask: runs of query tiles that start on each KV tile's diagonal and wrap
    s.d_qk = 192;
    s.d_v = 128;
    s.window = {70, 10};
    add(s);
    s.window = {};
    s.d_qk = s.d_v = 128;
    s.mask = MaskType::causal_bottom_right;
    s.s_q = 300;  // rows 0..199 see no key
    s.s_kv = 100;
    add(s);
    CaseSpec pad;
    pad.format = QkvFormat::sbhd;
    pad.mask = MaskType::padding_causal;
    pad.batch = 2;
    pad.s_q = 300;
    pad.s_kv = 280;
    pad.seqlens_q = {300, 77};
    pad.seqlens_kv = {150, 280};
    pad.h_q = 2;
    pad.h_kv = 1;
    pad.backward = true;
    add(pad);
    CaseSpec packed256;  // d 256 packed, no mask: KV tiles past a sequence's keys, a sequence without queries
    packed256.format = QkvFormat::thd;
    packed256.mask = MaskType::padding;
    packed256.batch = 4;
    packed256.seqlens_q = {200, 0, 50, 1};
    packed256.seqlens_kv = {300, 70, 0, 130};
    packed256.h_q = 2;
    packed256.h_kv = 1;
    packed256.d_qk = packed256.d_v = 256;
    packed256.backward = true;
    add(packed256);
    CaseSpec mods;
    mods.dtype = DType::f16;
    mods.batch = 1;
    mods.s_q = 257;
    mods.s_kv = 390;
    mods.h_q = 4;
    mods.h_kv = 2;
    mods.mask = MaskType::causal_bottom_right;
    mods.softcap = 15.0;
    mods.bias = BiasType::alibi;
    mods.dropout_p = 0.1;
    mods.seed = 3;
    mods.window = {150, 0};
    mods.backward = true;
    add(mods);
  }
  // Softcap, bias (with its gradient), ALiBi, dropout, arbitrary masks.
  {
    CaseSpec s;
    s.softcap = 30.0;
    s.mask = MaskType::causal;
    s.backward = true;
    add(s);
    s.softcap = 0.0;
    s.bias = BiasType::post_scale_bias;
    s.bias_shape = {1, 0, 0, 0};
    add(s);
    s.bias = BiasType::alibi;
    add(s);
    s.bias = BiasType::none;
    s.dropout_p = 0.15;
    s.seed = 1234;
    s.offset = 5;
    add(s);
    s.dropout_p = 0.0;
    s.mask = MaskType::arbitrary;
    add(s);
  }
  return cases;
}

}  // namespace testing
namespace {

using testing::CaseSpec;

class BackendGrid : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendGrid, MatchesTheReference) {
  ATTN_REQUIRE_GPU();
  const std::string backend = GetParam();
  const DeviceInfo dev = query_device(Device::cuda(0));
  const Backend* be = find_backend(backend);
  int ran = 0, forward_only = 0, index = 0;
  for (const CaseSpec& grid_spec : testing::backend_grid()) {
    SCOPED_TRACE("grid case " + std::to_string(index++));
    CaseSpec spec = grid_spec;
    Problem p = testing::problem_of(spec, spec.backward ? Pass::backward : Pass::forward, Device::cuda(0));
    if (spec.backward && !be->supports(p, dev).empty()) {
      // A backend without this backward is still held to the forward.
      spec.backward = false;
      spec.return_lse = true;
      p = testing::problem_of(spec, Pass::forward, Device::cuda(0));
      if (be->supports(p, dev).empty()) ++forward_only;
    }
    if (!be->supports(p, dev).empty()) continue;
    // A backend with its own random generator (cudnn) cannot match the reference's
    // dropout pattern; its own test checks the statistics instead.
    if (spec.dropout_p > 0 && !be->matches_reference_dropout()) continue;
    testing::Case gpu = testing::make_case(spec, Device::cuda(0), 1000 + index);
    testing::Case ref = testing::copy_inputs_to(gpu, Device::cpu(), DType::f64);
    testing::run_forced(ref, "reference");
    testing::run_forced(gpu, backend);
    ATTN_CUDA_OK(cudaDeviceSynchronize());
    SCOPED_TRACE(describe_problem(p));
    testing::expect_outputs_match(gpu, ref);
    ++ran;
  }
  EXPECT_GT(ran, 0) << backend << " claimed no grid case";
  std::printf("%s: %d grid cases compared with the reference (%d of them forward only)\n", backend.c_str(), ran,
              forward_only);
}

INSTANTIATE_TEST_SUITE_P(Registered, BackendGrid, ::testing::ValuesIn(testing::gpu_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace attn
