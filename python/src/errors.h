// attn::Error -> Python exceptions, with the core's full message and its parts
// as attributes (what, got, expected, fix, kind):
//   ErrorKind::value       -> ValueError
//   ErrorKind::type        -> TypeError
//   ErrorKind::unsupported -> attn.BackendUnavailableError (a RuntimeError)
//   ErrorKind::runtime     -> attn.ExecutionError (a RuntimeError)
#pragma once

#include <nanobind/nanobind.h>

namespace attn::python {

// Creates the two exception classes on module m and installs the translator.
void register_errors(nanobind::module_& m);

}  // namespace attn::python
