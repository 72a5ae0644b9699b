// A failed gRPC call as kgpu says it: one mapping of gRPC status codes to kgpu's error codes and
// one way to name them in messages ("UNAVAILABLE: failed to connect ..."), for the kubelet's
// APIs (registration, PodResources, the doctor's probes) and CRI alike. Header-only: only code
// that already links gRPC includes it.
#pragma once

#include <grpcpp/support/status.h>

#include <iterator>
#include <string>
#include <string_view>

#include "common/error.h"

namespace kgpu::grpc_error {

// "UNAVAILABLE" for StatusCode 14: some statuses carry no text, so messages name the code.
inline std::string_view code_name(grpc::StatusCode code) {
    static constexpr std::string_view names[] = {
        "OK",           "CANCELLED",     "UNKNOWN",  "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
        "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
    const int i = static_cast<int>(code);
    return i >= 0 && i < static_cast<int>(std::size(names)) ? names[i] : "gRPC error";
}

// What the failure means to the caller: a peer that did not answer in time, one that does not
// serve the method, one that refused us, one that refused what we sent (a device plugin's
// Allocate of an unknown ID); anything else is a peer not (yet) available.
inline Code code_of(grpc::StatusCode code) {
    switch (code) {
    case grpc::StatusCode::DEADLINE_EXCEEDED: return Code::timeout;
    case grpc::StatusCode::INVALID_ARGUMENT: return Code::invalid_argument;
    case grpc::StatusCode::UNIMPLEMENTED: return Code::not_supported;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED: return Code::no_permission;
    default: return Code::unavailable;
    }
}

// "UNAVAILABLE: <the status's message>", or the code's name alone when it carries none.
inline std::string describe(const grpc::Status& st) {
    std::string out(code_name(st.error_code()));
    if (!st.error_message().empty()) out += ": " + st.error_message();
    return out;
}

}  // namespace kgpu::grpc_error
