// The Kubernetes API client (client.h): configuration, HTTP/1.1 framing, one TLS connection per request.
#include "kube/client.h"

#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "common/fd.h"
#include "common/files.h"
#include "common/process.h"
#include "common/strings.h"
#include "kube/api_stats.h"

namespace kgpu::kube {
namespace {

namespace fs = std::filesystem;

// "https://host:port" (the port defaults to 443; IPv6 in brackets) into host and port.
Status parse_server(std::string_view server, ApiConfig& out, std::string_view where) {
    std::string_view rest = server;
    if (!rest.starts_with("https://"))
        return fail(Code::parse, "{}: server '{}': expected https://HOST[:PORT] (kgpu talks to the API server over TLS only)",
                    where, server);
    rest.remove_prefix(8);
    if (auto slash = rest.find('/'); slash != std::string_view::npos) {
        if (rest.substr(slash) != "/")
            return fail(Code::parse, "{}: server '{}': a path after the host is not supported", where, server);
        rest = rest.substr(0, slash);
    }
    std::string_view host = rest, port;
    if (rest.starts_with('[')) {
        const auto close = rest.find(']');
        if (close == std::string_view::npos) return fail(Code::parse, "{}: server '{}': unclosed '['", where, server);
        host = rest.substr(1, close - 1);
        rest.remove_prefix(close + 1);
        if (rest.starts_with(':')) port = rest.substr(1);
        else if (!rest.empty()) return fail(Code::parse, "{}: server '{}': expected ':PORT' after ']'", where, server);
    } else if (auto colon = rest.rfind(':'); colon != std::string_view::npos) {
        host = rest.substr(0, colon);
        port = rest.substr(colon + 1);
    }
    if (host.empty()) return fail(Code::parse, "{}: server '{}': no host", where, server);
    for (char c : host)
        if (static_cast<unsigned char>(c) <= ' ' || c == '@' || c == '/' || c == '?' || c == '#' || c == 0x7f)
            return fail(Code::parse, "{}: server '{}': the host has characters a host name cannot have", where, server);
    out.port = 443;
    if (!port.empty()) {
        int p = 0;
        auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
        if (ec != std::errc{} || end != port.data() + port.size() || p <= 0 || p > 65535)
            return fail(Code::parse, "{}: server '{}': port '{}' is not a number from 1 to 65535", where, server, port);
        out.port = p;
    }
    out.server = std::string(server);
    out.host = std::string(host);
    out.tls.host = out.host;
    return {};
}

// A PEM from a kubeconfig: the *-data field (base64) or the file field (relative to the kubeconfig).
Status read_pem(const YAML::Node& node, const char* data_key, const char* file_key, const fs::path& base,
                std::string& pem, std::string& source, std::string_view where) {
    if (auto d = node[data_key]; d && d.IsScalar()) {
        bool ok = false;
        std::string text;
        std::string compact;
        for (char c : d.Scalar())
            if (c != '\n' && c != '\r' && c != ' ') compact += c;
        text = strings::base64_decode(compact, ok);
        if (!ok) return fail(Code::parse, "{}: {}: not base64", where, data_key);
        pem = std::move(text);
        source = fmt::format("{}: {}", where, data_key);
        return {};
    }
    if (auto f = node[file_key]; f && f.IsScalar() && !f.Scalar().empty()) {
        fs::path p = f.Scalar();
        if (p.is_relative()) p = base / p;
        auto text = files::read(p);
        if (!text) return fail(Code::parse, "{}: {} {}: {}", where, file_key, p.string(), text.error().message);
        pem = std::move(*text);
        source = p.string();
    }
    return {};
}

// The entry named `name` in a kubeconfig list (clusters, users, contexts), its inner map.
YAML::Node named(const YAML::Node& list, const std::string& name, const char* inner) {
    if (!list || !list.IsSequence()) return YAML::Node(YAML::NodeType::Undefined);
    for (const auto& e : list)
        if (e.IsMap() && e["name"] && e["name"].IsScalar() && e["name"].Scalar() == name && e[inner] && e[inner].IsMap())
            return e[inner];
    return YAML::Node(YAML::NodeType::Undefined);
}

std::string scalar(const YAML::Node& n, const char* key) {
    auto v = n[key];
    return v && v.IsScalar() ? v.Scalar() : std::string();
}


}  // namespace

Result<ApiConfig> load_kubeconfig(const std::string& path) {
    auto text = files::read(path);
    if (!text) return fail(Code::not_found, "kubeconfig {}: {}", path, text.error().message);
    YAML::Node doc;
    try {
        doc = YAML::Load(*text);
    } catch (const YAML::Exception& e) {
        return fail(Code::parse, "kubeconfig {}: not YAML: {}", path, e.what());
    }
    if (!doc.IsMap()) return fail(Code::parse, "kubeconfig {}: expected a map (apiVersion: v1, kind: Config)", path);
    try {
        const std::string current = scalar(doc, "current-context");
        if (current.empty()) return fail(Code::parse, "kubeconfig {}: no current-context", path);
        auto context = named(doc["contexts"], current, "context");
        if (!context) return fail(Code::parse, "kubeconfig {}: current-context '{}' is not in contexts", path, current);
        const std::string cluster_name = scalar(context, "cluster"), user_name = scalar(context, "user");
        auto cluster = named(doc["clusters"], cluster_name, "cluster");
        if (!cluster) return fail(Code::parse, "kubeconfig {}: context '{}': cluster '{}' is not in clusters", path, current, cluster_name);
        ApiConfig out;
        out.source = path;
        const fs::path base = fs::path(path).parent_path();
        const std::string where_cluster = fmt::format("kubeconfig {}: cluster '{}'", path, cluster_name);
        if (auto st = parse_server(scalar(cluster, "server"), out, where_cluster); !st) return std::unexpected(st.error());
        if (auto name = scalar(cluster, "tls-server-name"); !name.empty()) out.tls.host = name;
        out.tls.insecure = scalar(cluster, "insecure-skip-tls-verify") == "true";
        if (auto st = read_pem(cluster, "certificate-authority-data", "certificate-authority", base, out.tls.ca_pem,
                               out.tls.ca_source, where_cluster);
            !st)
            return std::unexpected(st.error());
        if (!user_name.empty()) {
            auto user = named(doc["users"], user_name, "user");
            if (!user) return fail(Code::parse, "kubeconfig {}: context '{}': user '{}' is not in users", path, current, user_name);
            const std::string where_user = fmt::format("kubeconfig {}: user '{}'", path, user_name);
            out.token = scalar(user, "token");
            if (auto f = scalar(user, "tokenFile"); !f.empty()) out.token_file = fs::path(f).is_relative() ? (base / f).string() : f;
            if (auto st = read_pem(user, "client-certificate-data", "client-certificate", base, out.tls.cert_pem,
                                   out.tls.cert_source, where_user);
                !st)
                return std::unexpected(st.error());
            if (auto st = read_pem(user, "client-key-data", "client-key", base, out.tls.key_pem, out.tls.key_source, where_user);
                !st)
                return std::unexpected(st.error());
            if (out.tls.cert_pem.empty() != out.tls.key_pem.empty())
                return fail(Code::parse, "{}: a client certificate needs its key and the key its certificate", where_user);
            if (user["exec"] || user["auth-provider"])
                return fail(Code::parse, "{}: exec and auth-provider credentials are not supported (use a token, tokenFile or a client certificate)",
                            where_user);
        }
        return out;
    } catch (const YAML::Exception& e) {
        return fail(Code::parse, "kubeconfig {}: {}", path, e.what());
    }
}

Result<ApiConfig> in_cluster_config(const std::function<const char*(const char*)>& getenv, const std::string& account_dir) {
    const char* host = getenv("KUBERNETES_SERVICE_HOST");
    const char* port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host || !port || !*port)
        return fail(Code::not_found,
                    "no API server: --kubeconfig and KUBECONFIG are not set and KUBERNETES_SERVICE_HOST/_PORT are not either "
                    "(not running in a pod)");
    ApiConfig out;
    out.source = "in-cluster";
    const std::string h = host;
    const std::string server = h.find(':') != std::string::npos ? fmt::format("https://[{}]:{}", h, port)
                                                                : fmt::format("https://{}:{}", h, port);
    if (auto st = parse_server(server, out, "KUBERNETES_SERVICE_HOST/_PORT"); !st) return std::unexpected(st.error());
    out.token_file = account_dir + "/token";
    const std::string ca = account_dir + "/ca.crt";
    auto pem = files::read(ca);
    if (!pem) return fail(Code::not_found, "in-cluster: the service account's CA {}: {}", ca, pem.error().message);
    out.tls.ca_pem = std::move(*pem);
    out.tls.ca_source = ca;
    if (::access(out.token_file.c_str(), R_OK) != 0)
        return fail(Code::not_found, "in-cluster: the service account's token {} is not readable", out.token_file);
    return out;
}

Result<ApiConfig> resolve_config(const std::optional<std::string>& kubeconfig,
                                 const std::function<const char*(const char*)>& getenv) {
    if (kubeconfig && !kubeconfig->empty()) return load_kubeconfig(*kubeconfig);
    if (const char* env = getenv("KUBECONFIG"); env && *env) {
        std::string first(env);
        if (auto colon = first.find(':'); colon != std::string::npos) first.resize(colon);  // the first file of a list
        return load_kubeconfig(first);
    }
    return in_cluster_config(getenv);
}

Result<ApiConfig> resolve_config(const std::optional<std::string>& kubeconfig) {
    return resolve_config(kubeconfig, [](const char* n) { return std::getenv(n); });
}

Status check_node_name(std::string_view name) {
    if (name.empty() || name.size() > 253 || name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string_view::npos)
        return fail(Code::invalid_argument, "node name '{}': expected a DNS subdomain (lower-case letters, digits, '-', '.')",
                    name);
    return {};
}

std::chrono::nanoseconds RateLimiter::reserve(std::chrono::steady_clock::time_point now) {
    if (limit_.qps <= 0) return {};
    std::lock_guard lk(mu_);
    if (last_ && now > *last_)
        tokens_ = std::min<double>(limit_.burst, tokens_ + std::chrono::duration<double>(now - *last_).count() * limit_.qps);
    if (!last_ || now > *last_) last_ = now;
    tokens_ -= 1;  // may go below zero: the tokens owed by callers already waiting
    if (tokens_ >= 0) return {};
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(-tokens_ / limit_.qps));
}

Client::Client(ApiConfig config, std::chrono::milliseconds timeout, RateLimit limit)
    : config_(std::move(config)), timeout_(timeout), limiter_(limit) {}

// One connection: the TLS session is destroyed before its socket is closed (members in reverse).
struct Client::Conn {
    Fd sock;
    std::unique_ptr<exporter::TlsStream> tls;
};

Client::~Client() = default;

Status Client::open(Conn& c, std::string_view method, std::string_view path, std::string_view body,
                    std::string_view content_type, const std::string& what, std::string_view& kind) {
    std::string token = config_.token;
    kind = "token";
    if (!config_.token_file.empty()) {
        auto t = files::read(config_.token_file);  // every time: a projected token rotates
        if (!t) return fail(Code::unavailable, "{}: the token file {}: {}", what, config_.token_file, t.error().message);
        token = std::string(strings::trim(*t));
    }

    kind = "unreachable";
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(config_.port);
    if (int rc = ::getaddrinfo(config_.host.c_str(), port.c_str(), &hints, &found); rc != 0)
        return fail(Code::unavailable, "{}: cannot resolve {}: {}", what, config_.host, ::gai_strerror(rc));
    std::unique_ptr<addrinfo, void (*)(addrinfo*)> addrs(found, ::freeaddrinfo);
    std::string connect_error = "no address";
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout_.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout_.count() % 1000) * 1000);
    for (addrinfo* a = found; a; a = a->ai_next) {
        Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
        if (s.get() < 0) continue;
        // Blocking I/O bounded by the timeout (connect() honours SO_SNDTIMEO on Linux).
        ::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ::setsockopt(s.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (::connect(s.get(), a->ai_addr, a->ai_addrlen) == 0) {
            c.sock = std::move(s);
            break;
        }
        connect_error = errno == EINPROGRESS ? "timed out" : std::strerror(errno);
    }
    if (c.sock.get() < 0) return fail(Code::unavailable, "{}: connect: {}", what, connect_error);
    kind = "tls";
    auto tls = exporter::tls_connect(c.sock.get(), config_.tls);
    if (!tls) return fail(tls.error().code, "{}: {}", what, tls.error().message);
    c.tls = std::move(*tls);

    std::string req = fmt::format("{} {} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: kgpu\r\nAccept: application/json\r\n"
                                  "Connection: close\r\n",
                                  method, path, config_.host.find(':') != std::string::npos ? "[" + config_.host + "]" : config_.host,
                                  config_.port);
    if (!token.empty()) req += fmt::format("Authorization: Bearer {}\r\n", token);
    if (!body.empty() || method == "POST" || method == "PATCH" || method == "PUT")
        req += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\n", content_type, body.size());
    req += "\r\n";
    req.append(body);
    kind = "cut";
    for (std::size_t off = 0; off < req.size();) {
        std::size_t n = 0;
        if (c.tls->write(req.data() + off, req.size() - off, n) != exporter::TlsStream::Io::ok) {
            if (c.tls->error().empty()) kind = "timeout";
            return fail(Code::unavailable, "{}: sending the request: {}", what,
                        c.tls->error().empty() ? "timed out" : c.tls->error());
        }
        off += n;
    }
    return {};
}

// Every request counted once, by its answer's code or its failure's kind (ApiStats).
Result<Response> Client::counted(std::string_view method, std::string_view kind, Result<Response> r) {
    if (r) ApiStats::global().answer(method, r->status);
    else ApiStats::global().failure(method, kind);
    return r;
}

Result<Response> Client::request(std::string_view method, std::string_view path, std::string_view body,
                                 std::string_view content_type) {
    std::string_view kind;
    // OpenSSL writes to the socket with write(2): a write to a connection the API server has
    // reset after an earlier write already failed raises SIGPIPE, whose default action ends the
    // whole process (the device plugin, kgpu labels; only the exporter's server blocks it). The
    // test's fake API server died of exactly this before it blocked it too.
    const process::SigpipeBlocked no_sigpipe;
    auto r = request_once(method, path, body, content_type, kind);
    exporter::tls_release_pages();  // what OpenSSL brought in for this request (tls.h)
    return counted(method, kind, std::move(r));
}

Result<Response> Client::request_once(std::string_view method, std::string_view path, std::string_view body,
                                      std::string_view content_type, std::string_view& kind) {
    const std::string what = fmt::format("{} {}{}", method, config_.server, path);
    limiter_.wait();
    Conn c;
    if (auto st = open(c, method, path, body, content_type, what, kind); !st) return std::unexpected(st.error());
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    ResponseReader reader;
    std::string in;
    char buf[16384];
    bool received = false;
    for (;;) {
        std::size_t n = 0;
        const auto io = c.tls->read(buf, sizeof buf, n);
        if (io == exporter::TlsStream::Io::ok) {
            received = received || n > 0;
            if (auto st = reader.feed(std::string_view(buf, n), in); !st) {
                kind = "malformed";
                return fail(Code::parse, "{}: {}", what, st.error().message);
            }
        } else if (io == exporter::TlsStream::Io::closed) {
            if (auto st = reader.finish(); !st) {
                // Closed (or reset) before a whole answer: garbage only when bytes came that
                // are not HTTP; none at all is an API server going away.
                kind = received && !reader.head_done() && c.tls->error().empty() ? "malformed" : "cut";
                return fail(Code::parse, "{}: {}", what, st.error().message);
            }
        } else {
            kind = c.tls->error().empty() ? "timeout" : "cut";
            return fail(Code::unavailable, "{}: reading the response: {}", what,
                        c.tls->error().empty() ? "timed out" : c.tls->error());
        }
        if (reader.complete()) {
            c.tls->shutdown();
            Response r = reader.head();
            r.body = std::move(in);
            return r;
        }
        if (std::chrono::steady_clock::now() > deadline) {
            kind = "timeout";
            return fail(Code::unavailable, "{}: no complete response within {} ms", what, timeout_.count());
        }
    }
}

Result<Response> Client::stream(std::string_view path, const std::function<bool(std::string_view)>& on_body,
                                const std::atomic<bool>& stop, std::chrono::milliseconds idle) {
    std::string_view kind;
    const process::SigpipeBlocked no_sigpipe;
    bool answered = false;  // counted by its code when the answer's head came (a watch lasts minutes)
    auto r = stream_once(path, on_body, stop, idle, kind, answered);
    exporter::tls_release_pages();
    if (!answered && r && stop) return r;  // stopped before any answer: no request to count
    if (!answered) return counted("WATCH", kind, std::move(r));
    if (!r) ApiStats::global().error(kind);
    return r;
}

Result<Response> Client::stream_once(std::string_view path, const std::function<bool(std::string_view)>& on_body,
                                     const std::atomic<bool>& stop, std::chrono::milliseconds idle,
                                     std::string_view& kind, bool& answered) {
    const std::string what = fmt::format("GET {}{}", config_.server, path);
    limiter_.wait();
    Conn c;
    if (auto st = open(c, "GET", path, {}, {}, what, kind); !st) return std::unexpected(st.error());
    // From now on reads wake up every 500 ms to look at `stop` and the idle deadline.
    timeval tv{0, 500000};
    ::setsockopt(c.sock.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    auto last = std::chrono::steady_clock::now();
    bool touched = true;  // OpenSSL ran since the last tls_release_pages()
    bool full = true;     // the last read filled the buffer: OpenSSL may hold more of the record
    ResponseReader reader;
    std::string out;  // the body of a failure; a 200's body goes to on_body
    char buf[16384];
    for (;;) {
        if (stop) {
            Response r = reader.head();
            if (r.status == 0) r.status = 200;
            return r;
        }
        std::size_t n = 0;
        // Nothing on the socket and the last record drained (a read that did not fill the
        // buffer; OpenSSL reads no further ahead): the 500 ms wake-up stays out of OpenSSL, so
        // the pages tls_release_pages() gave back stay out of the RSS between events.
        auto io = exporter::TlsStream::Io::want_read;
        pollfd p{c.sock.get(), POLLIN, 0};
        if (full || ::poll(&p, 1, 500) != 0) io = c.tls->read(buf, sizeof buf, n);
        full = io == exporter::TlsStream::Io::ok && n == sizeof buf;
        std::string decoded;
        if (io == exporter::TlsStream::Io::ok) {
            last = std::chrono::steady_clock::now();
            touched = true;
            if (auto st = reader.feed(std::string_view(buf, n), decoded); !st) {
                kind = "malformed";
                return fail(Code::parse, "{}: {}", what, st.error().message);
            }
        } else if (io == exporter::TlsStream::Io::closed) {
            if (auto st = reader.finish(); !st) {
                kind = "cut";
                return fail(Code::unavailable, "{}: {}", what, st.error().message);
            }
        } else if (io == exporter::TlsStream::Io::want_read) {
            // Between a watch's events (a bookmark a minute or so) nothing of OpenSSL runs: what
            // the handshake and the last records brought in goes back once the stream is quiet.
            if (touched && std::chrono::steady_clock::now() - last > std::chrono::seconds(1)) {
                exporter::tls_release_pages();
                touched = false;
            }
            if (std::chrono::steady_clock::now() - last > idle) {
                kind = "timeout";
                return fail(Code::unavailable, "{}: nothing received for {} s", what,
                            std::chrono::duration_cast<std::chrono::seconds>(idle).count());
            }
            continue;
        } else {
            kind = "cut";
            return fail(Code::unavailable, "{}: reading the response: {}", what, c.tls->error());
        }
        if (!answered && reader.head_done()) {
            answered = true;
            ApiStats::global().answer("WATCH", reader.head().status);
        }
        if (!decoded.empty()) {
            if (reader.head().status == 200) {
                if (!on_body(decoded)) {
                    Response r = reader.head();
                    return r;
                }
            } else if (out.size() < (1u << 20)) {
                out += decoded;
            }
        }
        if (reader.complete()) {
            Response r = reader.head();
            if (r.status != 200) r.body = std::move(out);
            return r;
        }
    }
}

}  // namespace kgpu::kube
