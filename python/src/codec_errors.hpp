// Errors the extension's C++ code throws; zipcomm_ext.cpp turns them into Python exceptions.
// Plain C++ (no nanobind, no CUDA) so that the host and the GPU translation units share it.
#pragma once

#include <stdexcept>
#include <string>

#include <zipcomm/config.hpp>

namespace zipcomm_python {

/// A zipcomm::Status other than ok: becomes zipcomm.ZipcommError (with .status).
struct StatusError : std::runtime_error {
  zipcomm::Status status;
  StatusError(const std::string& where, zipcomm::Status s)
      : std::runtime_error(where + ": " + zipcomm::status_string(s)), status(s) {}
};

/// A CUDA runtime failure, or no usable GPU: becomes RuntimeError.
struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace zipcomm_python
