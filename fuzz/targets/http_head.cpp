// The exporter's HTTP request head parser (take_request_head / parse_head, exporter/http_parse.h),
// fed the bytes a client sent on one connection, as the server takes them: heads one after
// another until one is refused or the bytes run out. Each step is a refusal or a parsed request,
// never a crash, and:
//  - a parsed request has a token method and a path that starts with '/' (or is "*") without NUL;
//    a request with a body is never kept alive (its body would be read as the next request);
//  - a refusal is 400, 431 or 505 with a reason;
//  - the head and the empty lines before it lie within the bytes, the head within the 8 KiB limit;
//  - the result does not depend on how the bytes arrive: a head cut in two and looked at again
//    from where the first look stopped (`scanned`) ends at the same byte.
#include <algorithm>

#include "exporter/http_parse.h"
#include "fuzz.h"

using namespace kgpu;
using exporter::HeadScan;

namespace {

void check_head(const exporter::RequestHead& h) {
    if (h.status != 0) {
        KGPU_FUZZ_CHECK(h.status == 400 || h.status == 431 || h.status == 505, std::to_string(h.status));
        KGPU_FUZZ_CHECK(!h.why.empty(), "a refusal without a reason");
        return;
    }
    KGPU_FUZZ_CHECK(!h.method.empty(), "a request without a method");
    KGPU_FUZZ_CHECK(!h.path.empty(), "a request without a path");
    KGPU_FUZZ_CHECK(h.path == "*" || h.path.front() == '/', h.path);
    KGPU_FUZZ_CHECK(h.path.find('\0') == std::string::npos, "NUL in a path");
    KGPU_FUZZ_CHECK(!(h.has_body && h.keep_alive), "a request with a body kept alive");
}

}  // namespace

KGPU_FUZZ_TARGET(http_head) {
    std::string_view in = fuzz::text(data, size);
    for (int requests = 0; !in.empty() && requests < 64; ++requests) {
        const HeadScan s = exporter::take_request_head(in);
        KGPU_FUZZ_CHECK(s.skip <= in.size(), "skipped past the end");
        const std::string_view rest = in.substr(s.skip);
        switch (s.state) {
        case HeadScan::State::incomplete:
            KGPU_FUZZ_CHECK(rest.size() < exporter::kMaxRequestHead + 2, "an incomplete head past the limit");
            KGPU_FUZZ_CHECK(s.scanned == rest.size(), "scanned is not what was looked at");
            return 0;
        case HeadScan::State::too_large:
            KGPU_FUZZ_CHECK(rest.size() >= exporter::kMaxRequestHead + 2, "too large under the limit");
            return 0;
        case HeadScan::State::complete: break;
        }
        KGPU_FUZZ_CHECK(s.length > 0 && s.length <= rest.size(), "a head outside the bytes");
        KGPU_FUZZ_CHECK(s.length <= exporter::kMaxRequestHead + 2, "a head over the limit");
        check_head(s.head);
        // The same bytes in two parts: the first look stops somewhere inside the head.
        const std::size_t whole = s.skip + s.length;
        const std::size_t cut = 1 + (static_cast<std::size_t>(data[0]) * 131 + requests) % whole;
        if (cut < whole) {
            const HeadScan first = exporter::take_request_head(in.substr(0, cut));
            KGPU_FUZZ_CHECK(first.state == HeadScan::State::incomplete, "a head complete before its end");
            const HeadScan second = exporter::take_request_head(in.substr(first.skip), first.scanned);
            KGPU_FUZZ_CHECK(second.state == HeadScan::State::complete &&
                                first.skip + second.skip + second.length == whole,
                            "the head ends elsewhere when its bytes arrive in two parts");
            KGPU_FUZZ_CHECK(second.head.status == s.head.status && second.head.path == s.head.path,
                            "a different request when its bytes arrive in two parts");
        }
        if (s.head.status != 0) return 0;  // the server answers and closes
        in.remove_prefix(whole);
    }
    return 0;
}
