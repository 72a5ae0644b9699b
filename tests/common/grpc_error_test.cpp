// common/grpc_error.h: the one mapping of gRPC statuses to kgpu's codes and messages.
#include "common/grpc_error.h"

#include <gtest/gtest.h>

namespace kgpu {
namespace {

TEST(GrpcError, EachStatusMeansWhatItSaysToTheCaller) {
    EXPECT_EQ(grpc_error::code_of(grpc::StatusCode::DEADLINE_EXCEEDED), Code::timeout);
    EXPECT_EQ(grpc_error::code_of(grpc::StatusCode::UNIMPLEMENTED), Code::not_supported);
    EXPECT_EQ(grpc_error::code_of(grpc::StatusCode::PERMISSION_DENIED), Code::no_permission);
    EXPECT_EQ(grpc_error::code_of(grpc::StatusCode::UNAUTHENTICATED), Code::no_permission);
    EXPECT_EQ(grpc_error::code_of(grpc::StatusCode::INVALID_ARGUMENT), Code::invalid_argument);
    EXPECT_EQ(grpc_error::code_of(grpc::StatusCode::UNAVAILABLE), Code::unavailable);
    EXPECT_EQ(grpc_error::code_of(grpc::StatusCode::INTERNAL), Code::unavailable);
}

TEST(GrpcError, MessagesNameTheCodeAndKeepThePeersText) {
    EXPECT_EQ(grpc_error::describe(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unknown device bad")),
              "INVALID_ARGUMENT: unknown device bad");
    EXPECT_EQ(grpc_error::describe(grpc::Status(grpc::StatusCode::UNAVAILABLE, "")), "UNAVAILABLE");
    EXPECT_EQ(grpc_error::code_name(static_cast<grpc::StatusCode>(99)), "gRPC error");
}

}  // namespace
}  // namespace kgpu
