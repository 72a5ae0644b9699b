// PodResourcesClient and map_pod_resources (attribution.h): kubelet PodResources v1 List ->
// DeviceUse per GPU.
//
// The answer is read as raw bytes and walked once (issue #14): a parsed
// ListPodResourcesResponse of 100k pods costs far more memory than its 8 MiB of wire bytes,
// and every attributed container multiplies the series of its GPU, so both are bounded here:
// answers over max_message_bytes are refused by gRPC ("over-size") and at most
// max_pods_per_gpu containers per GPU are kept.
#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "common/grpc_error.h"
#include "common/log.h"
#include "exporter/attribution.h"
#include "exporter/attribution_log.h"
#include "podresources_v1.grpc.pb.h"

namespace kgpu::exporter {
namespace {

std::string_view failure_kind(grpc::StatusCode c) {
    switch (c) {
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "hung";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "over-size";
    case grpc::StatusCode::UNIMPLEMENTED: return "unimplemented";
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED: return "denied";
    default: return "unreachable";
    }
}

// How many left-out containers, skipped IDs and skipped names a log line names.
constexpr std::size_t kOverflowExamples = 8;
constexpr std::size_t kSkippedExamples = 5;
// The longest name a Kubernetes object has (a DNS subdomain); longer is not a pod.
constexpr std::size_t kMaxName = 253;

// ---- The protobuf wire format, just enough to walk a message without building it ------------

enum Wire : unsigned { kVarint = 0, kFixed64 = 1, kLen = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

struct Field {
    unsigned number = 0;
    unsigned type = 0;
    std::string_view bytes;  // kLen: the payload
};

// Walks the fields of one message held in memory. `base` is the message's offset in the whole
// answer, so errors name the byte where it went wrong.
class Reader {
public:
    Reader(std::string_view data, std::size_t base) : data_(data), base_(base) {}

    // The next field; false at the end or on malformed input (then error() is set).
    bool next(Field& f) {
        if (pos_ >= data_.size() || !error_.empty()) return false;
        const std::size_t at = pos_;
        std::uint64_t tag = 0;
        if (!varint(tag)) return bad(at, "a field tag");
        f.number = static_cast<unsigned>(tag >> 3);
        f.type = static_cast<unsigned>(tag & 7);
        if (f.number == 0 || (tag >> 3) > 0x1fffffff) return bad(at, "a field number between 1 and 2^29-1");
        f.bytes = {};
        switch (f.type) {
        case kVarint: {
            std::uint64_t v = 0;
            if (!varint(v)) return bad(at, "a varint");
            return true;
        }
        case kFixed64: return skip(8, at);
        case kFixed32: return skip(4, at);
        case kLen: {
            std::uint64_t n = 0;
            if (!varint(n)) return bad(at, "a length");
            if (n > data_.size() - pos_) return bad(at, "a length within the message");
            f.bytes = data_.substr(pos_, static_cast<std::size_t>(n));
            pos_ += static_cast<std::size_t>(n);
            return true;
        }
        case kStartGroup: return skip_group(f.number, at);
        default: return bad(at, "a wire type 0, 1, 2, 3 or 5");
        }
    }
    const std::string& error() const { return error_; }
    std::size_t offset(std::string_view inner) const {
        return base_ + static_cast<std::size_t>(inner.data() - data_.data());
    }

private:
    bool varint(std::uint64_t& v) {
        v = 0;
        for (unsigned shift = 0; shift < 70 && pos_ < data_.size(); shift += 7) {
            const auto b = static_cast<unsigned char>(data_[pos_++]);
            v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
            if (!(b & 0x80)) return true;
        }
        return false;
    }
    bool skip(std::size_t n, std::size_t at) {
        if (n > data_.size() - pos_) return bad(at, "a fixed-size value within the message");
        pos_ += n;
        return true;
    }
    // Groups are not proto3, but an unknown field may be one: skip it to its end tag.
    bool skip_group(unsigned number, std::size_t at) {
        std::vector<unsigned> open{number};
        while (!open.empty()) {
            if (open.size() > 32) return bad(at, "groups nested at most 32 deep");
            Field f;
            const std::size_t here = pos_;
            std::uint64_t tag = 0;
            if (!varint(tag)) return bad(here, "the end of a group");
            f.number = static_cast<unsigned>(tag >> 3);
            f.type = static_cast<unsigned>(tag & 7);
            if (f.type == kEndGroup) {
                if (f.number != open.back()) return bad(here, "the end tag of the open group");
                open.pop_back();
                continue;
            }
            if (f.type == kStartGroup) {
                open.push_back(f.number);
                continue;
            }
            std::uint64_t v = 0;
            if (f.type == kVarint) {
                if (!varint(v)) return bad(here, "a varint");
            } else if (f.type == kFixed64) {
                if (!skip(8, here)) return false;
            } else if (f.type == kFixed32) {
                if (!skip(4, here)) return false;
            } else if (f.type == kLen) {
                if (!varint(v) || v > data_.size() - pos_) return bad(here, "a length within the message");
                pos_ += static_cast<std::size_t>(v);
            } else {
                return bad(here, "a wire type 0, 1, 2, 3, 4 or 5");
            }
        }
        return true;
    }
    bool bad(std::size_t at, std::string_view expected) {
        error_ = fmt::format("byte {}: expected {}", base_ + at, expected);
        return false;
    }

    std::string_view data_;
    std::size_t base_;
    std::size_t pos_ = 0;
    std::string error_;
};

// Kubernetes names (pods, namespaces, containers) are short DNS labels. Anything that could not
// be one and would break the exposition (invalid UTF-8, control characters) or bloat it is not
// used as a label value.
bool usable_name(std::string_view s) {
    if (s.empty() || s.size() > kMaxName) return false;
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            if (c < 0x20 || c == 0x7f) return false;
            ++i;
            continue;
        }
        const std::size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
        if (n == 0 || i + n > s.size()) return false;
        std::uint32_t cp = c & (0x7f >> n);
        for (std::size_t k = 1; k < n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3f);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n;
    }
    return true;
}

// A value from the answer, quoted and escaped for a log line and cut to a readable length (the
// kubelet's answer is outside input: it must not be able to forge or flood log lines).
std::string quoted(std::string_view s) {
    constexpr std::size_t kMax = 80;
    if (s.size() <= kMax) return fmt::format("{:?}", s);
    return fmt::format("{:?}…({} bytes)", s.substr(0, kMax), s.size());
}

std::uint64_t mix(std::initializer_list<std::string_view> parts) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (auto p : parts) {
        h ^= std::hash<std::string_view>{}(p) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return h;
}

void note(SkippedEntries& s, std::uint64_t hash, const std::function<std::string()>& describe) {
    ++s.count;
    s.digest += hash;  // order-independent: the same set of entries gives the same digest
    if (s.examples.size() < kSkippedExamples) s.examples.push_back(describe());
}

// Accumulates the containers of each GPU, keeping only the first max_pods_per_gpu (plus the
// examples of left-out ones) in (pod, namespace, container, target) order, so which containers
// get series does not depend on the order the kubelet lists them in and stays the same from
// one pass to the next.
class Mapper {
public:
    Mapper(const inventory::Node& node, const PodResourcesOptions& o)
        : node_(node), options_(o), keep_(static_cast<std::size_t>(std::max(1u, o.max_pods_per_gpu)) + kOverflowExamples) {}

    // One PodResources message (`bytes`, at `base` in the answer). Errors: the message is malformed.
    Status pod(std::string_view bytes, std::size_t base) {
        Reader r(bytes, base);
        std::string_view name, ns;
        containers_.clear();
        for (Field f; r.next(f);) {
            if (f.number >= 1 && f.number <= 3 && f.type != kLen)
                return fail(Code::parse, "byte {}: PodResources field {} is not length-delimited", base, f.number);
            if (f.number == 1) name = f.bytes;
            else if (f.number == 2) ns = f.bytes;
            else if (f.number == 3) containers_.emplace_back(f.bytes, r.offset(f.bytes));
        }
        if (!r.error().empty()) return fail(Code::parse, "{} (in a PodResources)", r.error());
        for (const auto& [c, at] : containers_)
            if (auto s = container(name, ns, c, at); !s) return s;
        return {};
    }

    PodResourcesMap finish() {
        PodResourcesMap out;
        const std::size_t cap = std::max(1u, options_.max_pods_per_gpu);
        for (auto& [gpu, acc] : gpus_) {
            std::size_t i = 0;
            PodOverflow over;
            over.gpu_index = gpu;
            for (const auto& e : acc.kept) {
                if (i++ < cap) out.uses.push_back(DeviceUse{e.target, e.pod, e.replica});
                else if (over.examples.size() < kOverflowExamples) over.examples.push_back(e.pod);
            }
            if (acc.total > cap) {
                over.attributed = cap;
                over.left_out = acc.total - cap;
                out.overflow.push_back(std::move(over));
            }
        }
        std::ranges::sort(out.uses);
        out.unknown_ids = std::move(unknown_);
        out.bad_names = std::move(bad_names_);
        return out;
    }

private:
    struct Entry {
        PodRef pod;
        DeviceTarget target;
        std::string replica;  // replica_of the device ID (the lowest, as text sorts, of one container's)
        auto operator<=>(const Entry&) const = default;
    };
    struct Acc {
        std::set<Entry> kept;
        std::size_t total = 0;
    };
    using Key = std::tuple<std::string_view, std::string_view, std::string_view, DeviceTarget>;
    static Key key(std::string_view pod, std::string_view ns, std::string_view c, const DeviceTarget& t) {
        return {pod, ns, c, t};
    }
    static Key key(const Entry& e) {
        return key(std::string_view(e.pod.pod), std::string_view(e.pod.namespace_name), std::string_view(e.pod.container),
                   e.target);
    }

    Status container(std::string_view pod, std::string_view ns, std::string_view bytes, std::size_t base) {
        Reader r(bytes, base);
        std::string_view name;
        devices_.clear();
        for (Field f; r.next(f);) {
            if (f.number <= 2 && f.type != kLen)
                return fail(Code::parse, "byte {}: ContainerResources field {} is not length-delimited", base, f.number);
            if (f.number == 1) name = f.bytes;
            else if (f.number == 2) devices_.emplace_back(f.bytes, r.offset(f.bytes));
        }
        if (!r.error().empty()) return fail(Code::parse, "{} (in a ContainerResources)", r.error());

        targets_.clear();
        for (const auto& [d, at] : devices_) {
            Reader dr(d, at);
            std::string_view resource;
            ids_.clear();
            for (Field f; dr.next(f);) {
                if (f.number <= 2 && f.type != kLen)
                    return fail(Code::parse, "byte {}: ContainerDevices field {} is not length-delimited", at, f.number);
                if (f.number == 1) resource = f.bytes;
                else if (f.number == 2) ids_.push_back(f.bytes);
            }
            if (!dr.error().empty()) return fail(Code::parse, "{} (in a ContainerDevices)", dr.error());
            if (!is_gpu_resource(resource, options_.extra_resources)) continue;
            for (auto id : ids_) {
                if (auto t = resolve_device_id(id, node_)) {
                    // Two replicas of one GPU in one container are one use, named by the lower one.
                    auto r = replica_of(id);
                    auto it = std::ranges::find(targets_, *t, &std::pair<DeviceTarget, std::string>::first);
                    if (it == targets_.end()) targets_.emplace_back(*t, std::move(r));
                    else if (r < it->second) it->second = std::move(r);
                    continue;
                }
                note(unknown_, mix({resource, id, ns, pod, name}), [&] {
                    return fmt::format("{} of {} (pod {}/{}, container {})", quoted(id), quoted(resource), quoted(ns),
                                       quoted(pod), quoted(name));
                });
            }
        }
        if (targets_.empty()) return {};
        if (!usable_name(pod) || !usable_name(ns) || !usable_name(name)) {
            note(bad_names_, mix({ns, pod, name}), [&] {
                return fmt::format("pod {}/{}, container {}", quoted(ns), quoted(pod), quoted(name));
            });
            return {};
        }
        for (const auto& [t, r] : targets_) add(pod, ns, name, t, r);
        return {};
    }

    void add(std::string_view pod, std::string_view ns, std::string_view c, const DeviceTarget& t,
             const std::string& replica) {
        Acc& acc = gpus_[t.gpu_index];
        const auto k = key(pod, ns, c, t);
        if (acc.kept.size() >= keep_ && k > key(*acc.kept.rbegin())) {
            ++acc.total;  // past everything kept: only counted
            return;
        }
        auto [it, inserted] = acc.kept.insert(Entry{PodRef{std::string(pod), std::string(ns), std::string(c)}, t, replica});
        if (!inserted) return;  // listed twice
        ++acc.total;
        if (acc.kept.size() > keep_) acc.kept.erase(std::prev(acc.kept.end()));
    }

    const inventory::Node& node_;
    const PodResourcesOptions& options_;
    const std::size_t keep_;
    std::map<unsigned, Acc> gpus_;
    SkippedEntries unknown_, bad_names_;
    // Scratch, reused from one pod to the next.
    std::vector<std::pair<std::string_view, std::size_t>> containers_, devices_;
    std::vector<std::string_view> ids_;
    std::vector<std::pair<DeviceTarget, std::string>> targets_;
};

// The top level of a ListPodResourcesResponse from a stream: each PodResources (field 1) is
// copied into `scratch` (pods are small) and mapped; other fields are skipped.
Result<PodResourcesMap> map_stream(google::protobuf::io::CodedInputStream& in, const inventory::Node& node,
                                   const PodResourcesOptions& options) {
    using google::protobuf::io::CodedInputStream;
    Mapper m(node, options);
    std::string scratch;
    for (;;) {
        const std::size_t at = static_cast<std::size_t>(in.CurrentPosition());
        const std::uint32_t tag = in.ReadTag();
        if (tag == 0) {
            if (in.ConsumedEntireMessage()) break;
            return fail(Code::parse, "byte {}: expected a field tag", at);
        }
        const unsigned number = tag >> 3, type = tag & 7;
        if (number == 1) {
            std::uint32_t len = 0;
            if (type != kLen) return fail(Code::parse, "byte {}: field 1 (pod_resources) is not length-delimited", at);
            if (!in.ReadVarint32(&len) || !in.ReadString(&scratch, static_cast<int>(len)))
                return fail(Code::parse, "byte {}: expected a PodResources of {} bytes, the answer ends first", at, len);
            const std::size_t base = static_cast<std::size_t>(in.CurrentPosition()) - scratch.size();
            if (auto s = m.pod(scratch, base); !s) return std::unexpected(s.error());
            continue;
        }
        // Anything else (a newer kubelet's fields): skipped, as protobuf would.
        if (type == kEndGroup || type > kFixed32) return fail(Code::parse, "byte {}: wire type {} is not valid here", at, type);
        if (!google::protobuf::internal::WireFormatLite::SkipField(&in, tag))
            return fail(Code::parse, "byte {}: field {} runs past the end of the answer", at, number);
    }
    return m.finish();
}

}  // namespace

Result<PodResourcesMap> map_pod_resources(std::string_view serialized, const inventory::Node& node,
                                          const PodResourcesOptions& options) {
    if (serialized.size() > static_cast<std::size_t>(INT32_MAX))
        return fail(Code::parse, "a PodResources answer of {} bytes is larger than protobuf allows", serialized.size());
    google::protobuf::io::CodedInputStream in(reinterpret_cast<const std::uint8_t*>(serialized.data()),
                                              static_cast<int>(serialized.size()));
    return map_stream(in, node, options);
}

struct PodResourcesClient::Impl {
    PodResourcesOptions options;
    std::string path;  // the socket path, as messages name it
    std::shared_ptr<grpc::Channel> channel;
    detail::FailureLog failures;
    std::string_view failure = "unreachable";  // nothing asked yet
    // What the last lines said (log once per state change, issue #14).
    std::pair<std::size_t, std::uint64_t> logged_unknown{0, 0}, logged_bad{0, 0};
    std::vector<std::pair<unsigned, std::size_t>> logged_overflow;

    void report(const PodResourcesMap& m);
};

PodResourcesClient::PodResourcesClient(PodResourcesOptions options) : impl_(std::make_unique<Impl>()) {
    auto& im = *impl_;
    im.options = std::move(options);
    std::string_view s = im.options.socket;
    if (s.starts_with("unix://")) s.remove_prefix(7);
    else if (s.starts_with("unix:")) s.remove_prefix(5);
    im.path = std::string(s);
    if (im.path.empty()) return;  // list() reports it
    // A kubelet restart removes and re-creates the socket. gRPC's default reconnect backoff grows
    // to 120 s, which would hide pod labels for minutes after the kubelet is back; a local socket
    // is cheap to retry, so cap it at one second.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // Kubernetes' own PodResources client allows 16 MiB: a node with many pods can exceed gRPC's
    // 4 MiB. A larger answer fails the call with RESOURCE_EXHAUSTED before it is buffered.
    args.SetMaxReceiveMessageSize(static_cast<int>(std::min<std::size_t>(im.options.max_message_bytes, INT32_MAX)));
    im.channel = grpc::CreateCustomChannel("unix:" + im.path, grpc::InsecureChannelCredentials(), args);
}

PodResourcesClient::~PodResourcesClient() = default;

std::string_view PodResourcesClient::failure() const { return impl_->failure; }

void PodResourcesClient::Impl::report(const PodResourcesMap& m) {
    auto summary = [&](const SkippedEntries& s, std::pair<std::size_t, std::uint64_t>& logged, std::string_view what) {
        const std::pair<std::size_t, std::uint64_t> now{s.count, s.digest};
        if (now == logged) return;
        logged = now;
        if (s.count == 0) {
            log::info("PodResources on {}: no {} any more", path, what);
            return;
        }
        log::warn("PodResources on {}: {} {} skipped: {}{} (logged again only when this changes)", path, s.count, what,
                  fmt::join(s.examples, "; "),
                  s.count > s.examples.size() ? fmt::format("; and {} more", s.count - s.examples.size()) : "");
    };
    summary(m.unknown_ids, logged_unknown, "device IDs that match no GPU on this node");
    summary(m.bad_names, logged_bad, "containers whose pod, namespace or container name cannot be a label value");

    std::vector<std::pair<unsigned, std::size_t>> over;
    for (const auto& o : m.overflow) over.emplace_back(o.gpu_index, o.left_out);
    if (over == logged_overflow) return;
    logged_overflow = over;
    if (over.empty()) {
        log::info("PodResources on {}: every container holding a GPU has its series again", path);
        return;
    }
    std::vector<std::string> parts;
    for (const auto& o : m.overflow) {
        std::vector<std::string> names;
        for (const auto& p : o.examples) names.push_back(fmt::format("{}/{}/{}", p.namespace_name, p.pod, p.container));
        parts.push_back(fmt::format("GPU {}: {} left out ({}{})", o.gpu_index, o.left_out, fmt::join(names, ", "),
                                    o.left_out > names.size() ? ", …" : ""));
    }
    log::warn("PodResources on {}: more than {} containers hold a GPU; only the first {} (by pod, namespace, "
              "container) get series, the others are counted in kgpu_exporter_pods_over_limit: {}",
              path, options.max_pods_per_gpu, options.max_pods_per_gpu, fmt::join(parts, "; "));
}

Result<PodResourcesMap> PodResourcesClient::list(const inventory::Node& node) {
    auto& im = *impl_;
    if (!im.channel) {
        auto err = Error::make(Code::invalid_argument, "PodResources socket '{}': expected a path or unix:///path",
                               im.options.socket);
        im.failure = "misconfigured";
        im.failures.failed(err.message);
        return std::unexpected(err);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + im.options.timeout);
    v1::ListPodResourcesRequest req;
    grpc::ByteBuffer answer;
    // The generated stub would parse the whole answer into messages; ask for the bytes instead.
    static const grpc::internal::RpcMethod kList("/v1.PodResourcesLister/List", grpc::internal::RpcMethod::NORMAL_RPC);
    grpc::Status st = grpc::internal::BlockingUnaryCall<v1::ListPodResourcesRequest, grpc::ByteBuffer,
                                                        grpc::protobuf::MessageLite, grpc::ByteBuffer>(
        im.channel.get(), kList, &ctx, req, &answer);
    if (!st.ok()) {
        const auto c = st.error_code();
        im.failure = failure_kind(c);
        std::string what;
        if (c == grpc::StatusCode::DEADLINE_EXCEEDED)
            what = fmt::format(" (hung: no answer within {} ms)", im.options.timeout.count());
        else if (c == grpc::StatusCode::RESOURCE_EXHAUSTED)
            what = fmt::format(" (over-size: the answer is larger than the {} MiB accepted)",
                               im.options.max_message_bytes >> 20);
        else if (c == grpc::StatusCode::UNIMPLEMENTED)
            what = " (the socket does not serve the PodResources v1 API)";
        auto err = Error::make(c == grpc::StatusCode::RESOURCE_EXHAUSTED ? Code::parse : grpc_error::code_of(c),
                               "PodResources List on {} failed: {}{}; pod labels are left out until it answers",
                               im.path, grpc_error::describe(st), what);
        im.failures.failed(err.message);
        return std::unexpected(err);
    }
    Result<PodResourcesMap> mapped = fail(Code::parse, "the answer could not be read");
    {
        grpc::ProtoBufferReader reader(&answer);
        if (reader.status().ok()) {
            google::protobuf::io::CodedInputStream in(&reader);
            mapped = map_stream(in, node, im.options);
        }
    }
    answer.Clear();
    if (!mapped) {
        im.failure = "garbage";
        auto err = Error::make(Code::parse,
                               "PodResources List on {} answered garbage: not a ListPodResourcesResponse ({}); pod "
                               "labels are left out until it answers",
                               im.path, mapped.error().message);
        im.failures.failed(err.message);
        return std::unexpected(err);
    }
    im.failure = "";
    im.failures.ok(fmt::format("PodResources List on {} answers again", im.path));
    im.report(*mapped);
    return mapped;
}

}  // namespace kgpu::exporter
