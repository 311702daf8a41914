// The exception translator of attn._C (see errors.h).
#include "errors.h"

#include "attn/error.h"

namespace nb = nanobind;

namespace attn::python {
namespace {

PyObject* g_backend_unavailable = nullptr;
PyObject* g_execution_error = nullptr;

const char* kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::value: return "value";
    case ErrorKind::type: return "type";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::runtime: return "runtime";
  }
  return "?";
}

PyObject* exception_type(ErrorKind k) {
  switch (k) {
    case ErrorKind::value: return PyExc_ValueError;
    case ErrorKind::type: return PyExc_TypeError;
    case ErrorKind::unsupported: return g_backend_unavailable;
    case ErrorKind::runtime: return g_execution_error;
  }
  return PyExc_RuntimeError;
}

// Raises `type(message)` with the parts of info as attributes, so callers can
// act on e.fix without parsing the message.
void raise(const Error& e) {
  const ErrorInfo& info = e.info();
  PyObject* type = exception_type(info.kind);
  PyObject* exc = PyObject_CallFunction(type, "s", e.what());
  if (!exc) return;  // the call raised; leave that error set
  const std::pair<const char*, const std::string*> parts[] = {
      {"what", &info.what}, {"got", &info.got}, {"expected", &info.expected}, {"fix", &info.fix}};
  for (const auto& [attr, value] : parts) {
    PyObject* s = PyUnicode_FromStringAndSize(value->data(), static_cast<Py_ssize_t>(value->size()));
    if (s) {
      PyObject_SetAttrString(exc, attr, s);
      Py_DECREF(s);
    }
  }
  PyObject* kind = PyUnicode_FromString(kind_name(info.kind));
  if (kind) {
    PyObject_SetAttrString(exc, "kind", kind);
    Py_DECREF(kind);
  }
  PyErr_Clear();  // a failed attribute assignment must not mask the real error
  PyErr_SetObject(type, exc);
  Py_DECREF(exc);
}

}  // namespace

void register_errors(nb::module_& m) {
  g_backend_unavailable = PyErr_NewExceptionWithDoc(
      "attn._C.BackendUnavailableError",
      "No attention backend (or not the forced one) can run this call on this device. The message "
      "lists every backend with its reasons; attn.explain(...) gives them as data.",
      PyExc_RuntimeError, nullptr);
  g_execution_error = PyErr_NewExceptionWithDoc(
      "attn._C.ExecutionError", "A CUDA or library failure while running an attention call.",
      PyExc_RuntimeError, nullptr);
  m.attr("BackendUnavailableError") = nb::handle(g_backend_unavailable);
  m.attr("ExecutionError") = nb::handle(g_execution_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      raise(e);
    }
  });
}

}  // namespace attn::python
