// attn._C: the compiled half of `import attn`. Thin: tensors arrive as DLPack
// arrays (outputs preallocated by the pure-Python layer in the caller's
// framework), options as an Options object; validation, selection and the
// errors are the C++ core's own.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attn/attn.h"
#include "attn/build_info.h"
#include "errors.h"
#include "tensors.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace attn::python {
void bind_cp(nb::module_& m);  // cp_module.cpp
namespace {

using OptIn = std::optional<InArray>;
using OptOut = std::optional<OutArray>;

// Inputs both passes share, converted in one place.
struct InputArrays {
  OptIn cu_seqlens_q, cu_seqlens_kv, bias, alibi_slopes, attn_mask, rng_state, sink;
};

Inputs make_inputs(const InArray& q, const InArray& k, const InArray& v, const InputArrays& a) {
  Inputs in;
  in.q = to_view(q, "q");
  in.k = to_view(k, "k");
  in.v = to_view(v, "v");
  in.cu_seqlens_q = to_view(a.cu_seqlens_q, "cu_seqlens_q");
  in.cu_seqlens_kv = to_view(a.cu_seqlens_kv, "cu_seqlens_kv");
  in.bias = to_view(a.bias, "bias");
  in.alibi_slopes = to_view(a.alibi_slopes, "alibi_slopes");
  in.attn_mask = to_view(a.attn_mask, "attn_mask");
  in.rng_state = to_view(a.rng_state, "rng_state");
  in.sink = to_view(a.sink, "sink");
  return in;
}

// Policy::from_env() (ATTN_BACKEND, ATTN_DISABLE, ATTN_LOG), then the call's
// own backend= and disable= on top.
Policy make_policy(const std::optional<std::string>& backend, const std::vector<std::string>& disable) {
  Policy policy = Policy::from_env();
  if (backend && !backend->empty()) policy.forced = *backend;
  policy.disabled.insert(policy.disabled.end(), disable.begin(), disable.end());
  return policy;
}

// The call's stream and, when given, a Python callable (bytes -> device
// address) that serves the workspace from a framework's allocator: attn.torch
// passes one under CUDA graph capture. The call runs without the GIL; the
// callable takes it back.
RunContext run_context(uintptr_t stream, const nb::object& workspace_allocator) {
  RunContext ctx;
  ctx.stream = reinterpret_cast<void*>(stream);
  if (!workspace_allocator.is_none())
    ctx.workspace_allocator = [workspace_allocator](int64_t bytes) -> void* {
      nb::gil_scoped_acquire gil;
      return reinterpret_cast<void*>(nb::cast<uintptr_t>(workspace_allocator(bytes)));
    };
  return ctx;
}

nb::tuple selection_tuple(const Selection& s) {
  return nb::make_tuple(std::string(s.backend ? s.backend->name() : ""), s.why);
}

// ---- explain: tensors or (shape, dtype) specs ----------------------------

// A q/k/v-like argument of explain(): a DLPack array, or a (shape, dtype) pair.
TensorView explain_view(const nb::handle& obj, const char* name, Device spec_device) {
  if (obj.is_none()) return TensorView{};
  InArray a;
  if (nb::try_cast(obj, a, false)) return to_view(a, name);
  if (nb::isinstance<nb::tuple>(obj) || nb::isinstance<nb::list>(obj)) {
    nb::sequence seq = nb::borrow<nb::sequence>(obj);
    if (nb::len(seq) == 2) {
      std::vector<int64_t> shape;
      std::string dtype;
      if (nb::try_cast(seq[0], shape, true) && nb::try_cast(seq[1], dtype, true))
        return spec_view(shape, dtype, spec_device);
    }
  }
  fail(ErrorKind::type, std::string(name) + " is neither an array nor a (shape, dtype) pair",
       nb::type_name(obj.type()).c_str(), "a NumPy/PyTorch/JAX/CuPy array, or e.g. ((2, 128, 16, 64), \"bfloat16\")",
       std::string("pass ") + name + " itself, or its shape and dtype");
}

// An output view shaped like `like` with last dimension `last` (data-less).
TensorView spec_like(const TensorView& like, int64_t last) {
  if (!like.defined()) return TensorView{};
  std::vector<int64_t> shape(like.shape.begin(), like.shape.begin() + like.rank);
  shape.back() = last;
  return make_view(nullptr, like.dtype, like.rank, shape.data(), nullptr, like.device);
}

// lse's shape for q in format f, or an undefined view when q's rank does not
// fit f (validation then reports q's rank, the real problem).
TensorView lse_spec(const TensorView& q, QkvFormat f) {
  std::vector<int64_t> shape;
  if (f == QkvFormat::thd && q.rank == 3) shape = {q.shape[1], q.shape[0]};
  if (f == QkvFormat::bshd && q.rank == 4) shape = {q.shape[0], q.shape[2], q.shape[1]};
  if (f == QkvFormat::sbhd && q.rank == 4) shape = {q.shape[1], q.shape[2], q.shape[0]};
  if (shape.empty()) return TensorView{};
  return make_view(nullptr, DType::f32, static_cast<int>(shape.size()), shape.data(), nullptr, q.device);
}

// A float32 [h_q] spec (sink, max_logit, dsink) for q in format f, or an
// undefined view when q's rank does not fit f.
TensorView per_head_spec(const TensorView& q, QkvFormat f) {
  const int heads_dim = f == QkvFormat::thd ? 1 : 2;
  if (!q.defined() || q.rank != (f == QkvFormat::thd ? 3 : 4)) return TensorView{};
  const int64_t shape[1] = {q.shape[heads_dim]};
  return make_view(nullptr, DType::f32, 1, shape, nullptr, q.device);
}

// The device whose verdicts are asked for: none = the tensors' own (a CUDA GPU
// when only shapes were given and one exists); "cpu"; "cuda" / "cuda:N"; or a
// simulated architecture "sm80", "sm86", "sm89", "sm90".
DeviceInfo target_device(const std::optional<std::string>& spec, const Device& tensors, bool only_specs) {
  if (!spec || spec->empty()) {
    if (only_specs) return cuda_device_count() > 0 ? query_device(Device::cuda(0)) : DeviceInfo{};
    return query_device(tensors);
  }
  if (*spec == "cpu") return DeviceInfo{};
  if (spec->rfind("cuda", 0) == 0) {
    int index = 0;
    if (spec->size() > 5 && (*spec)[4] == ':') index = std::stoi(spec->substr(5));
    else if (spec->size() != 4)
      fail(ErrorKind::value, "unknown device", *spec, "cpu, cuda, cuda:N, or a simulated sm80/sm86/sm89/sm90",
           "name one of those devices");
    return query_device(Device::cuda(index));
  }
  return simulated_device(*spec);
}

nb::dict explain_call(const Options& opts, const std::string& pass, nb::handle q_obj, nb::handle k_obj,
                      nb::handle v_obj, const InputArrays& a, nb::handle bias_obj,
                      nb::handle alibi_obj, nb::handle mask_obj, bool return_lse, bool bias_grad,
                      bool return_max_logit, const std::optional<std::string>& device,
                      const std::optional<std::string>& backend, const std::vector<std::string>& disable) {
  if (pass != "forward" && pass != "backward")
    fail(ErrorKind::value, "unknown pass", pass, "\"forward\" or \"backward\"", "pass one of those");
  // Data-less specs live where the real tensors (if any) live, so the core's
  // same-device checks hold; cu_seqlens carry values and are real arrays.
  Device spec_device = Device::cpu();
  bool only_specs = true;
  for (nb::handle h : {q_obj, k_obj, v_obj}) {
    InArray arr;
    if (nb::try_cast(h, arr, false)) {
      spec_device = to_view(arr, "q").device;
      only_specs = false;
      break;
    }
  }
  Inputs in;
  if (only_specs && a.cu_seqlens_q) spec_device = to_view(a.cu_seqlens_q, "cu_seqlens_q").device;
  in.q = explain_view(q_obj, "q", spec_device);
  in.k = explain_view(k_obj, "k", spec_device);
  in.v = explain_view(v_obj, "v", spec_device);
  in.cu_seqlens_q = to_view(a.cu_seqlens_q, "cu_seqlens_q");
  in.cu_seqlens_kv = to_view(a.cu_seqlens_kv, "cu_seqlens_kv");
  in.bias = explain_view(bias_obj, "bias", spec_device);
  in.alibi_slopes = explain_view(alibi_obj, "alibi_slopes", spec_device);
  in.attn_mask = explain_view(mask_obj, "attn_mask", spec_device);
  const bool learnable = opts.softmax_type == SoftmaxType::learnable;
  if (learnable) in.sink = per_head_spec(in.q, opts.qkv_format);

  const int64_t d_v = in.v.defined() ? in.v.size(-1) : 0;
  Problem p;
  if (pass == "forward") {
    ForwardArgs args;
    args.in = in;
    args.out = spec_like(in.q, d_v);
    if (return_lse) args.lse = lse_spec(in.q, opts.qkv_format);
    if (return_max_logit) args.max_logit = per_head_spec(in.q, opts.qkv_format);
    p = validate_forward(opts, args);
  } else {
    BackwardArgs args;
    args.in = in;
    args.out = spec_like(in.q, d_v);
    args.dout = args.out;
    args.lse = lse_spec(in.q, opts.qkv_format);
    args.dq = spec_like(in.q, in.q.defined() ? in.q.size(-1) : 0);
    args.dk = spec_like(in.k, in.k.defined() ? in.k.size(-1) : 0);
    args.dv = spec_like(in.v, d_v);
    if (bias_grad && in.bias.defined()) args.dbias = spec_like(in.bias, in.bias.size(-1));
    if (learnable) args.dsink = in.sink;
    p = validate_backward(opts, args);
  }

  const DeviceInfo dev = target_device(device, p.device, only_specs);
  p.device = dev.device;
  Policy policy = make_policy(backend, disable);
  policy.log_level = 0;
  const std::vector<Verdict> verdicts = explain(p, dev, policy);

  nb::dict r;
  r["problem"] = describe_problem(p);
  r["device"] = dev.name;
  r["sm"] = dev.sm;
  r["simulated"] = dev.simulated;
  nb::list vs;
  for (const Verdict& v : verdicts) vs.append(nb::make_tuple(v.backend, v.in_build, v.reasons));
  r["verdicts"] = vs;
  r["table"] = format_verdicts(verdicts);
  try {
    const Selection s = select_backend(p, dev, policy);
    r["chosen"] = std::string(s.backend->name());
    r["why"] = s.why;
  } catch (const Error& e) {
    r["chosen"] = nb::none();
    r["why"] = e.info().what + (e.info().fix.empty() ? "" : "; " + e.info().fix);
  }
  return r;
}

// ---- Options as a Python object ------------------------------------------

QkvFormat parse_format_or_fail(const std::string& s) {
  if (auto f = parse_format(s)) return *f;
  fail(ErrorKind::value, "unknown qkv_format", s, "\"bshd\", \"sbhd\" or \"thd\"",
       "name the order of q's dimensions: bshd [batch, seq, heads, dim], sbhd [seq, batch, heads, dim], "
       "thd [tokens, heads, dim]");
}

SoftmaxType parse_softmax_type_or_fail(const std::string& s) {
  if (auto t = parse_softmax_type(s)) return *t;
  fail(ErrorKind::value, "unknown softmax_type", s, "\"vanilla\", \"off-by-one\" or \"learnable\"",
       "pass one of TransformerEngine's softmax types (learnable with sink=)");
}

MaskType parse_mask_or_fail(const std::string& s) {
  if (auto m = parse_mask(s)) return *m;
  fail(ErrorKind::value, "unknown mask type", s,
       "no_mask, causal, causal_bottom_right, padding, padding_causal, padding_causal_bottom_right or arbitrary",
       "pass one of those names");
}

void bind_options(nb::module_& m) {
  nb::class_<Options>(m, "Options",
                      "attn::Options: what a call chooses besides its tensors (docs/SEMANTICS.md).")
      .def(nb::init<>())
      .def_prop_rw(
          "qkv_format", [](const Options& o) { return std::string(format_name(o.qkv_format)); },
          [](Options& o, const std::string& s) { o.qkv_format = parse_format_or_fail(s); })
      .def_prop_rw(
          "mask", [](const Options& o) { return std::string(mask_name(o.mask)); },
          [](Options& o, const std::string& s) { o.mask = parse_mask_or_fail(s); })
      .def_prop_rw(
          "window", [](const Options& o) { return std::make_pair(o.window.left, o.window.right); },
          [](Options& o, std::pair<int64_t, int64_t> w) { o.window = {w.first, w.second}; })
      .def_rw("softmax_scale", &Options::softmax_scale)
      .def_rw("softcap", &Options::softcap)
      .def_rw("max_seqlen_q", &Options::max_seqlen_q)
      .def_rw("max_seqlen_kv", &Options::max_seqlen_kv)
      .def_rw("dropout_p", &Options::dropout_p)
      .def_rw("seed", &Options::seed)
      .def_rw("offset", &Options::offset)
      .def_rw("deterministic", &Options::deterministic)
      .def_rw("check_seqlens", &Options::check_seqlens)
      .def_prop_rw(
          "softmax_type", [](const Options& o) { return std::string(softmax_type_name(o.softmax_type)); },
          [](Options& o, const std::string& s) { o.softmax_type = parse_softmax_type_or_fail(s); });
}

}  // namespace
}  // namespace attn::python

NB_MODULE(_C, m) {
  using namespace attn;
  using namespace attn::python;
  m.doc() = "attn's compiled core: validation, backend selection and the backends themselves.";
  // Options objects live on in attn's cache and in autograd graphs that are
  // still alive when the interpreter exits; that is not a leak, so no report.
  nb::set_leak_warnings(false);
  register_errors(m);
  bind_options(m);
  bind_cp(m);

  m.def(
      "forward",
      [](const Options& opts, const InArray& q, const InArray& k, const InArray& v, const OutArray& out,
         const OptOut& lse, const OptIn& cu_seqlens_q, const OptIn& cu_seqlens_kv, const OptIn& bias,
         const OptIn& alibi_slopes, const OptIn& attn_mask, const std::optional<std::string>& backend,
         const std::vector<std::string>& disable, uintptr_t stream, const nb::object& workspace_allocator,
         const OptIn& rng_state, const OptIn& sink, const OptOut& max_logit) {
        ForwardArgs args;
        args.in = make_inputs(q, k, v, {cu_seqlens_q, cu_seqlens_kv, bias, alibi_slopes, attn_mask, rng_state, sink});
        args.out = to_view(out, "out");
        args.lse = to_view(lse, "lse");
        args.max_logit = to_view(max_logit, "max_logit");
        const Policy policy = make_policy(backend, disable);
        const RunContext ctx = run_context(stream, workspace_allocator);
        Selection s;
        {
          nb::gil_scoped_release release;
          s = forward(opts, args, ctx, policy);
        }
        return selection_tuple(s);
      },
      "options"_a, "q"_a.noconvert(), "k"_a.noconvert(), "v"_a.noconvert(), "out"_a.noconvert(),
      "lse"_a.noconvert() = nb::none(), "cu_seqlens_q"_a.noconvert() = nb::none(),
      "cu_seqlens_kv"_a.noconvert() = nb::none(), "bias"_a.noconvert() = nb::none(),
      "alibi_slopes"_a.noconvert() = nb::none(), "attn_mask"_a.noconvert() = nb::none(),
      "backend"_a = nb::none(), "disable"_a = std::vector<std::string>{}, "stream"_a = 0,
      "workspace_allocator"_a = nb::none(), "rng_state"_a.noconvert() = nb::none(),
      "sink"_a.noconvert() = nb::none(), "max_logit"_a.noconvert() = nb::none(),
      "Validates, selects a backend and runs the forward pass into the preallocated out (and lse, max_logit). "
      "Returns (backend name, why it was chosen).");

  m.def(
      "forward_with_kvcache",
      [](const Options& opts, const InArray& q, const OutArray& k_cache, const OutArray& v_cache, const OutArray& out,
         const OptIn& k, const OptIn& v, const OptIn& cache_seqlens, const OptIn& cache_batch_idx,
         const OptIn& block_table, const OptIn& rotary_cos, const OptIn& rotary_sin, bool rotary_interleaved,
         const OptIn& alibi_slopes, const OptIn& sink, const OptOut& lse, int num_splits,
         const std::optional<std::string>& backend, const std::vector<std::string>& disable, uintptr_t stream,
         const nb::object& workspace_allocator) {
        KvCacheArgs args;
        args.q = to_view(q, "q");
        args.k_cache = to_view(k_cache, "k_cache");
        args.v_cache = to_view(v_cache, "v_cache");
        args.out = to_view(out, "out");
        args.k = to_view(k, "k");
        args.v = to_view(v, "v");
        args.cache_seqlens = to_view(cache_seqlens, "cache_seqlens");
        args.cache_batch_idx = to_view(cache_batch_idx, "cache_batch_idx");
        args.block_table = to_view(block_table, "block_table");
        args.rotary_cos = to_view(rotary_cos, "rotary_cos");
        args.rotary_sin = to_view(rotary_sin, "rotary_sin");
        args.rotary_interleaved = rotary_interleaved;
        args.alibi_slopes = to_view(alibi_slopes, "alibi_slopes");
        args.sink = to_view(sink, "sink");
        args.lse = to_view(lse, "lse");
        args.num_splits = num_splits;
        const Policy policy = make_policy(backend, disable);
        const RunContext ctx = run_context(stream, workspace_allocator);
        Selection s;
        {
          nb::gil_scoped_release release;
          s = forward_with_kvcache(opts, args, ctx, policy);
        }
        return selection_tuple(s);
      },
      "options"_a, "q"_a.noconvert(), "k_cache"_a.noconvert(), "v_cache"_a.noconvert(), "out"_a.noconvert(),
      "k"_a.noconvert() = nb::none(), "v"_a.noconvert() = nb::none(), "cache_seqlens"_a.noconvert() = nb::none(),
      "cache_batch_idx"_a.noconvert() = nb::none(), "block_table"_a.noconvert() = nb::none(),
      "rotary_cos"_a.noconvert() = nb::none(), "rotary_sin"_a.noconvert() = nb::none(),
      "rotary_interleaved"_a = true, "alibi_slopes"_a.noconvert() = nb::none(), "sink"_a.noconvert() = nb::none(),
      "lse"_a.noconvert() = nb::none(), "num_splits"_a = 0, "backend"_a = nb::none(),
      "disable"_a = std::vector<std::string>{}, "stream"_a = 0, "workspace_allocator"_a = nb::none(),
      "Appends k / v into the cache and runs q against it into the preallocated out (and lse). "
      "Returns (backend name, why it was chosen).");

  m.def(
      "backward",
      [](const Options& opts, const InArray& q, const InArray& k, const InArray& v, const InArray& out,
         const InArray& dout, const InArray& lse, const OutArray& dq, const OutArray& dk, const OutArray& dv,
         const OptOut& dbias, const OptIn& cu_seqlens_q, const OptIn& cu_seqlens_kv, const OptIn& bias,
         const OptIn& alibi_slopes, const OptIn& attn_mask, const std::optional<std::string>& backend,
         const std::vector<std::string>& disable, uintptr_t stream, const nb::object& workspace_allocator,
         const OptIn& rng_state, const OptIn& sink, const OptOut& dsink) {
        BackwardArgs args;
        args.in = make_inputs(q, k, v, {cu_seqlens_q, cu_seqlens_kv, bias, alibi_slopes, attn_mask, rng_state, sink});
        args.out = to_view(out, "out");
        args.dout = to_view(dout, "dout");
        args.lse = to_view(lse, "lse");
        args.dq = to_view(dq, "dq");
        args.dk = to_view(dk, "dk");
        args.dv = to_view(dv, "dv");
        args.dbias = to_view(dbias, "dbias");
        args.dsink = to_view(dsink, "dsink");
        const Policy policy = make_policy(backend, disable);
        const RunContext ctx = run_context(stream, workspace_allocator);
        Selection s;
        {
          nb::gil_scoped_release release;
          s = backward(opts, args, ctx, policy);
        }
        return selection_tuple(s);
      },
      "options"_a, "q"_a.noconvert(), "k"_a.noconvert(), "v"_a.noconvert(), "out"_a.noconvert(),
      "dout"_a.noconvert(), "lse"_a.noconvert(), "dq"_a.noconvert(), "dk"_a.noconvert(), "dv"_a.noconvert(),
      "dbias"_a.noconvert() = nb::none(), "cu_seqlens_q"_a.noconvert() = nb::none(),
      "cu_seqlens_kv"_a.noconvert() = nb::none(), "bias"_a.noconvert() = nb::none(),
      "alibi_slopes"_a.noconvert() = nb::none(), "attn_mask"_a.noconvert() = nb::none(),
      "backend"_a = nb::none(), "disable"_a = std::vector<std::string>{}, "stream"_a = 0,
      "workspace_allocator"_a = nb::none(), "rng_state"_a.noconvert() = nb::none(),
      "sink"_a.noconvert() = nb::none(), "dsink"_a.noconvert() = nb::none(),
      "Validates, selects a backend and runs the backward pass into the preallocated dq, dk, dv "
      "(and dbias, dsink). Returns (backend name, why it was chosen).");

  m.def(
      "rotary",
      [](const InArray& x, const InArray& freqs, const OutArray& out, const std::string& format,
         const OptIn& cu_seqlens, bool backward, uintptr_t stream) {
        RotaryArgs args;
        args.x = to_view(x, "x");
        args.freqs = to_view(freqs, "freqs");
        args.cu_seqlens = to_view(cu_seqlens, "cu_seqlens");
        args.out = to_view(out, "out");
        const std::optional<QkvFormat> f = parse_format(format);
        if (!f) fail(ErrorKind::value, "rotary: unknown format", format, "sbhd, bshd or thd", "name one of them");
        args.format = *f;
        args.backward = backward;
        args.stream = reinterpret_cast<void*>(stream);
        nb::gil_scoped_release release;
        rotary(args);
      },
      "x"_a.noconvert(), "freqs"_a.noconvert(), "out"_a.noconvert(), "format"_a,
      "cu_seqlens"_a.noconvert() = nb::none(), "backward"_a = false, "stream"_a = 0,
      "Rotary position embedding (TransformerEngine's non-interleaved form) of x into out, in one pass; "
      "backward=True applies the gradient's (transposed) rotation. See attn/rotary.h.");

  m.def(
      "explain",
      [](const Options& opts, const std::string& pass, nb::handle q, nb::handle k, nb::handle v,
         const OptIn& cu_seqlens_q, const OptIn& cu_seqlens_kv, nb::handle bias, nb::handle alibi_slopes,
         nb::handle attn_mask, bool return_lse, bool bias_grad, bool return_max_logit,
         const std::optional<std::string>& device, const std::optional<std::string>& backend,
         const std::vector<std::string>& disable) {
        return explain_call(opts, pass, q, k, v, {cu_seqlens_q, cu_seqlens_kv, {}, {}, {}}, bias,
                            alibi_slopes, attn_mask, return_lse, bias_grad, return_max_logit, device, backend,
                            disable);
      },
      "options"_a, "pass_"_a, "q"_a, "k"_a, "v"_a, nb::kw_only(), "cu_seqlens_q"_a.noconvert() = nb::none(),
      "cu_seqlens_kv"_a.noconvert() = nb::none(), "bias"_a = nb::none(), "alibi_slopes"_a = nb::none(),
      "attn_mask"_a = nb::none(), "return_lse"_a = false, "bias_grad"_a = false, "return_max_logit"_a = false,
      "device"_a = nb::none(),
      "backend"_a = nb::none(), "disable"_a = std::vector<std::string>{},
      "Every backend's verdict on a call, as a dict: problem, device, sm, simulated, verdicts "
      "[(backend, in_build, reasons)], table, chosen (or None), why. q, k, v, bias, alibi_slopes "
      "and attn_mask may be arrays or (shape, dtype) pairs.");

  m.def(
      "backends",
      []() {
        std::vector<std::pair<std::string, bool>> r;
        for (const std::string& name : preference_order(simulated_device("sm90")))
          r.emplace_back(name, find_backend(name) != nullptr);
        return r;
      },
      "Every backend attn knows, as (name, compiled into this build).");
  m.def(
      "build_info",
      []() {
        const BuildInfo b = attn::build_info();
        nb::dict r;
        r["version"] = b.version;
        r["commit"] = b.commit;
        r["cuda_toolkit"] = cuda_version_string(b.cuda_toolkit);
        r["cuda_runtime"] = b.cuda_runtime ? nb::object(nb::str(cuda_version_string(b.cuda_runtime).c_str())) : nb::none();
        r["cuda_driver"] = b.cuda_driver ? nb::object(nb::str(cuda_version_string(b.cuda_driver).c_str())) : nb::none();
        r["cudnn"] = b.cudnn ? nb::object(nb::str(cudnn_version_string(b.cudnn).c_str())) : nb::none();
        r["backends"] = b.backends;
        return r;
      },
      "What this build holds: version, commit, CUDA toolkit (and runtime, driver: None where absent), cuDNN "
      "(None: built without the cudnn backend) and the backends compiled in.");
  m.def("cuda_device_count", &cuda_device_count, "CUDA devices this process can use (0 without a GPU).");
  m.def(
      "device_info",
      [](const std::string& spec) {
        const DeviceInfo d = target_device(spec, Device::cpu(), false);
        nb::dict r;
        r["device"] = device_name(d.device);
        r["name"] = d.name;
        r["sm"] = d.sm;
        r["sm_count"] = d.sm_count;
        r["smem_per_block_optin_bytes"] = d.smem_per_block_optin_bytes;
        r["global_mem_bytes"] = d.global_mem_bytes;
        r["simulated"] = d.simulated;
        return r;
      },
      "device"_a = "cpu", "What selection knows about a device: \"cpu\", \"cuda:N\" or a simulated \"sm80\".");
}
