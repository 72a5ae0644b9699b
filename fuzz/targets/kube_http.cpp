// The Kubernetes API client's HTTP/1.1 response framing (kube::parse_response, kube/http.h), fed
// what an API server (or whatever answers in its place) sent. Must hold: a refusal names
// "HTTP response"; a status is 100..599; a body is never over the limit; a response complete
// before the end of the connection is the same one at its end; the bytes arriving in two parts
// give the same answer (the first part incomplete or already the same complete response), and the
// incremental reader (kube::ResponseReader) decodes the same fed in two parts as at once.
#include "fuzz.h"
#include "kube/http.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(kube_http) {
    if (size < 1) return -1;
    const std::size_t limit = 64 + data[0] * 16u;
    const std::string_view in = fuzz::text(data + 1, size - 1);
    bool complete = false;
    auto r = kube::parse_response(in, false, complete, limit);
    bool eof_complete = false;
    auto at_eof = kube::parse_response(in, true, eof_complete, limit);
    if (!r) {
        KGPU_FUZZ_CHECK(r.error().message.starts_with("HTTP response"), r.error().message);
        KGPU_FUZZ_CHECK(!at_eof, "refused while open, accepted at the end");
        return 0;
    }
    if (at_eof) {
        KGPU_FUZZ_CHECK(eof_complete, "an answer at the end that is not complete");
        KGPU_FUZZ_CHECK(at_eof->status >= 100 && at_eof->status <= 599, std::to_string(at_eof->status));
        KGPU_FUZZ_CHECK(at_eof->body.size() <= limit, "a body over the limit");
        (void)kube::describe_failure("GET", "/", *at_eof);
    } else {
        KGPU_FUZZ_CHECK(at_eof.error().message.starts_with("HTTP response"), at_eof.error().message);
    }
    if (complete) {
        KGPU_FUZZ_CHECK(at_eof && at_eof->status == r->status && at_eof->body == r->body,
                        "complete before the end, different at the end");
        // A prefix is incomplete or the same response (nothing after it changes it).
        const std::size_t cut = (static_cast<std::size_t>(data[0]) * 257) % (in.size() + 1);
        bool part_complete = false;
        auto part = kube::parse_response(in.substr(0, cut), false, part_complete, limit);
        KGPU_FUZZ_CHECK(part.has_value(), part ? "" : part.error().message);
        if (part_complete) KGPU_FUZZ_CHECK(part->status == r->status && part->body == r->body, "a prefix answered differently");
    }
    // The reader fed in two parts, cut anywhere, decodes what it decodes fed at once.
    {
        const std::size_t cut = (static_cast<std::size_t>(data[0]) * 131) % (in.size() + 1);
        kube::ResponseReader whole(limit), parts(limit);
        std::string a, b;
        const bool ok_whole = whole.feed(in, a).has_value();
        const bool ok_parts = parts.feed(in.substr(0, cut), b).has_value() && parts.feed(in.substr(cut), b).has_value();
        KGPU_FUZZ_CHECK(ok_whole == ok_parts, "fed in two parts, accepted differently");
        if (ok_whole) {
            KGPU_FUZZ_CHECK(a == b, "fed in two parts, decoded differently");
            KGPU_FUZZ_CHECK(whole.complete() == parts.complete(), "fed in two parts, complete differently");
        }
    }
    return 0;
}
