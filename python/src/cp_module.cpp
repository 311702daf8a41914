// attn._C's context-parallel entry points (attn/cp.py wraps them): the plan's
// rule and the fallback's layout (attn/cp.h; Python computes neither itself),
// NCCL communicators as integer handles, and the ring passes on DLPack arrays.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attn/cp.h"
#include "tensors.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace attn::python {

namespace {

cp::Communicator comm_of(uintptr_t handle, int rank, int size) { return {reinterpret_cast<void*>(handle), rank, size}; }

Policy policy_of(const std::optional<std::string>& backend, const std::vector<std::string>& disable) {
  Policy p = Policy::from_env();
  if (backend && !backend->empty()) p.forced = *backend;
  p.disabled.insert(p.disabled.end(), disable.begin(), disable.end());
  return p;
}

}  // namespace

void bind_cp(nb::module_& m) {
  m.def("cp_nccl_available", &cp::nccl_available, "True when this build has context parallelism over NCCL.");
  m.def("cp_unique_id", [] {
    const std::vector<unsigned char> id = cp::nccl_unique_id();
    return nb::bytes(reinterpret_cast<const char*>(id.data()), id.size());
  });
  m.def(
      "cp_comm_init",
      [](nb::bytes id, int rank, int size, int device) {
        const auto* p = static_cast<const unsigned char*>(id.data());
        std::vector<unsigned char> bytes(p, p + id.size());
        cp::Communicator c;
        {
          nb::gil_scoped_release release;  // blocks until every rank joins
          c = cp::nccl_init(bytes, rank, size, device);
        }
        return reinterpret_cast<uintptr_t>(c.nccl_comm);
      },
      "unique_id"_a, "rank"_a, "size"_a, "device"_a);
  m.def("cp_comm_destroy", [](uintptr_t handle, int rank, int size) {
    cp::Communicator c = comm_of(handle, rank, size);
    cp::nccl_destroy(c);
  });
  // The 2*cp rule and the fallback's layout: lengths are the whole sequences'.
  m.def(
      "cp_first_rule_breaker",
      [](const std::vector<int64_t>& lengths, int cp) -> std::optional<int64_t> {
        const int64_t s = cp::first_rule_breaker(lengths, cp);
        return s < 0 ? std::nullopt : std::optional<int64_t>(s);
      },
      "lengths"_a, "cp"_a, "The first sequence whose length is not a multiple of 2*cp, or None.");
  m.def("cp_check_lengths", &cp::check_lengths, "lengths"_a, "cp"_a, "allow_fallback"_a = cp::kAllowFallback,
        "Raises ValueError naming the first sequence that breaks the 2*cp rule.");
  m.def("cp_uses_fallback", &cp::uses_fallback, "lengths"_a, "cp"_a, "allow_fallback"_a,
        "allow_fallback_fix"_a = cp::kAllowFallback,
        "True when the batch takes the fallback layout (allowed, and a sequence breaks the rule); without "
        "the fallback a breaker raises the rule's ValueError.");
  m.def(
      "cp_fallback_piece",
      [](int64_t length, int rank, int cp) {
        const cp::Piece p = cp::fallback_piece(length, rank, cp);
        return std::pair<int64_t, int64_t>(p.begin, p.end);
      },
      "length"_a, "rank"_a, "cp"_a, "The fallback's rows [begin, end) of a sequence on this rank.");
  m.def("cp_rank_positions", &cp::rank_positions, "lengths"_a, "rank"_a, "cp"_a, "fallback"_a,
        "Global positions of a rank's rows in local order: chunks r and 2cp-1-r of each packed sequence, or "
        "(fallback) each one's contiguous piece.");
  m.def("cp_fallback_rows", &cp::fallback_rows, "lengths"_a, "cp"_a,
        "Rows each rank holds in the fallback layout, in rank order.");
  m.def("cp_plan", [](const Options& opts, int size, int64_t chunk) { return cp::describe_plan(opts, size, chunk); });
  m.def(
      "cp_forward",
      [](const Options& opts, const InArray& q, const InArray& k, const InArray& v, const OutArray& out,
         const std::optional<OutArray>& lse, const std::optional<InArray>& cu_seqlens, uintptr_t comm, int rank,
         int size, const std::optional<std::string>& backend, const std::vector<std::string>& disable,
         uintptr_t stream, const std::optional<InArray>& sink, const std::optional<OutArray>& max_logit) {
        ForwardArgs a;
        a.in.q = to_view(q, "q"), a.in.k = to_view(k, "k"), a.in.v = to_view(v, "v");
        a.in.cu_seqlens_q = a.in.cu_seqlens_kv = to_view(cu_seqlens, "cu_seqlens_q");
        a.in.sink = to_view(sink, "sink");
        a.out = to_view(out, "out");
        a.lse = to_view(lse, "lse");
        a.max_logit = to_view(max_logit, "max_logit");
        const Policy policy = policy_of(backend, disable);
        nb::gil_scoped_release release;
        cp::forward(opts, a, comm_of(comm, rank, size), RunContext{reinterpret_cast<void*>(stream)}, policy);
      },
      "options"_a, "q"_a.noconvert(), "k"_a.noconvert(), "v"_a.noconvert(), "out"_a.noconvert(),
      "lse"_a.noconvert() = nb::none(), "cu_seqlens"_a.noconvert() = nb::none(), "comm"_a = 0, "rank"_a = 0,
      "size"_a = 1, "backend"_a = nb::none(), "disable"_a = std::vector<std::string>{}, "stream"_a = 0,
      "sink"_a.noconvert() = nb::none(), "max_logit"_a.noconvert() = nb::none());
  m.def(
      "cp_backward",
      [](const Options& opts, const InArray& q, const InArray& k, const InArray& v, const InArray& out,
         const InArray& dout, const InArray& lse, const OutArray& dq, const OutArray& dk, const OutArray& dv,
         const std::optional<InArray>& cu_seqlens, uintptr_t comm, int rank, int size,
         const std::optional<std::string>& backend, const std::vector<std::string>& disable, uintptr_t stream,
         const std::optional<InArray>& sink, const std::optional<OutArray>& dsink) {
        BackwardArgs a;
        a.in.q = to_view(q, "q"), a.in.k = to_view(k, "k"), a.in.v = to_view(v, "v");
        a.in.cu_seqlens_q = a.in.cu_seqlens_kv = to_view(cu_seqlens, "cu_seqlens_q");
        a.in.sink = to_view(sink, "sink");
        a.dsink = to_view(dsink, "dsink");
        a.out = to_view(out, "out"), a.dout = to_view(dout, "dout"), a.lse = to_view(lse, "lse");
        a.dq = to_view(dq, "dq"), a.dk = to_view(dk, "dk"), a.dv = to_view(dv, "dv");
        const Policy policy = policy_of(backend, disable);
        nb::gil_scoped_release release;
        cp::backward(opts, a, comm_of(comm, rank, size), RunContext{reinterpret_cast<void*>(stream)}, policy);
      },
      "options"_a, "q"_a.noconvert(), "k"_a.noconvert(), "v"_a.noconvert(), "out"_a.noconvert(),
      "dout"_a.noconvert(), "lse"_a.noconvert(), "dq"_a.noconvert(), "dk"_a.noconvert(), "dv"_a.noconvert(),
      "cu_seqlens"_a.noconvert() = nb::none(), "comm"_a = 0, "rank"_a = 0, "size"_a = 1, "backend"_a = nb::none(),
      "disable"_a = std::vector<std::string>{}, "stream"_a = 0, "sink"_a.noconvert() = nb::none(),
      "dsink"_a.noconvert() = nb::none());
}

}  // namespace attn::python
