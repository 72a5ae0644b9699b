// HttpServer (http.h): one thread, one epoll set, non-blocking sockets.
//
// Every connection is in one phase; the phase decides what the server waits for, the deadline,
// and how expendable the connection is when room is needed (Rank). Connections are indexed three
// ways: by id (epoll data), by (rank, since) globally and per client address (eviction), and by
// deadline (timers). Closed connections are parked until the end of the event batch, so an event
// later in the same batch for a connection closed earlier finds nothing instead of a reused fd.
#include "exporter/http.h"

#include <arpa/inet.h>
#include <csignal>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "common/log.h"
#include "common/strings.h"
#include "exporter/tls.h"
#include "exporter/web_config.h"

namespace kgpu::exporter {

HttpResponse HttpResponse::text(unsigned status, std::string body) {
    HttpResponse r;
    r.status = status;
    r.body = std::make_shared<const std::string>(std::move(body));
    return r;
}

Result<ListenAddress> parse_listen_address(std::string_view text) {
    auto bad = [&] {
        return fail(Code::invalid_argument, "expected host:port, :port or [ipv6]:port with a port 0-65535, got '{}'",
                    text);
    };
    ListenAddress out;
    std::string_view port;
    if (text.starts_with('[')) {
        auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') return bad();
        out.host = std::string(text.substr(1, close - 1));
        port = text.substr(close + 2);
        if (out.host.empty()) return bad();
    } else {
        auto colon = text.rfind(':');
        if (colon == std::string_view::npos) return bad();
        out.host = std::string(text.substr(0, colon));
        if (out.host.find(':') != std::string::npos) return bad();  // a bare IPv6 address needs brackets
        port = text.substr(colon + 1);
    }
    unsigned value = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || p != port.data() + port.size() || value > 65535) return bad();
    out.port = static_cast<std::uint16_t>(value);
    return out;
}

bool accepts_gzip(std::string_view header) {
    for (auto part : strings::split(header, ',')) {
        auto semi = part.find(';');
        auto coding = strings::trim(part.substr(0, semi));
        if (!(strings::lower(coding) == "gzip" || coding == "*")) continue;
        if (semi == std::string_view::npos) return true;
        // "gzip;q=0" refuses it; any other q accepts.
        auto params = strings::trim(part.substr(semi + 1));
        if (params.starts_with("q=") || params.starts_with("Q=")) {
            auto q = strings::trim(params.substr(2));
            bool zero = !q.empty();
            for (char c : q)
                if (c != '0' && c != '.') zero = false;
            if (zero) continue;
        }
        return true;
    }
    return false;
}

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxHead = 8192;       // request line + headers
constexpr std::size_t kMaxHeaders = 100;
constexpr auto kLinger = std::chrono::seconds(2);  // reading what a closing client still sends
constexpr std::size_t kMaxLingerBytes = 1 << 20;
constexpr std::size_t kAuthQueue = 64;      // bcrypt checks waiting for the worker
constexpr std::size_t kAuthCache = 100;     // remembered (user, password) answers, as the toolkit
constexpr std::uint64_t kListenId = 1, kWakeId = 2, kFirstConnId = 16;
constexpr auto kLogAgainAfter = std::chrono::seconds(60);

struct Socket {
    int fd = -1;
    ~Socket() {
        if (fd >= 0) ::close(fd);
    }
    int release() { return std::exchange(fd, -1); }
};

std::string numeric(const sockaddr_storage& ss) {
    char host[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET6) {
        auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
        ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        return fmt::format("[{}]:{}", host, ntohs(a->sin6_port));
    }
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    return fmt::format("{}:{}", host, ntohs(a->sin_port));
}

// The client as the per-peer limit counts it: an IPv4 address (also when mapped into IPv6), or
// an IPv6 /64 (one host commonly holds a whole /64). Returns the key and a printable form.
std::pair<std::string, std::string> peer_of(const sockaddr_storage& ss) {
    char text[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET6) {
        const auto& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&a)) {
            ::inet_ntop(AF_INET, a.s6_addr + 12, text, sizeof text);
            return {std::string(reinterpret_cast<const char*>(a.s6_addr + 12), 4), text};
        }
        in6_addr net{};
        std::memcpy(net.s6_addr, a.s6_addr, 8);
        ::inet_ntop(AF_INET6, &net, text, sizeof text);
        return {std::string(reinterpret_cast<const char*>(a.s6_addr), 8), std::string(text) + "/64"};
    }
    if (ss.ss_family == AF_INET) {
        const auto& a = reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr;
        ::inet_ntop(AF_INET, &a, text, sizeof text);
        return {std::string(reinterpret_cast<const char*>(&a), 4), text};
    }
    return {"", "unknown"};
}

Result<int> bind_one(const sockaddr* addr, socklen_t len, int family, unsigned backlog, bool dual_stack) {
    Socket s;
    s.fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s.fd < 0) return fail(Code::io, "socket: {}", std::strerror(errno));
    int one = 1;
    ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (family == AF_INET6) {
        int v6only = dual_stack ? 0 : 1;
        ::setsockopt(s.fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
    }
    if (::bind(s.fd, addr, len) != 0) return fail(Code::io, "bind: {}", std::strerror(errno));
    if (::listen(s.fd, static_cast<int>(backlog)) != 0) return fail(Code::io, "listen: {}", std::strerror(errno));
    return s.release();
}

Result<int> listen_on(const ListenAddress& a, unsigned backlog, const std::string& text) {
    if (a.host.empty()) {
        // Every address: IPv6 with IPv4 mapped, or IPv4 alone where the host has no IPv6.
        sockaddr_in6 six{};
        six.sin6_family = AF_INET6;
        six.sin6_addr = in6addr_any;
        six.sin6_port = htons(a.port);
        auto fd = bind_one(reinterpret_cast<sockaddr*>(&six), sizeof six, AF_INET6, backlog, true);
        if (fd) return fd;
        sockaddr_in four{};
        four.sin_family = AF_INET;
        four.sin_addr.s_addr = htonl(INADDR_ANY);
        four.sin_port = htons(a.port);
        auto fd4 = bind_one(reinterpret_cast<sockaddr*>(&four), sizeof four, AF_INET, backlog, false);
        if (!fd4) return fail(Code::io, "listening on {}: {}", text, fd4.error().message);
        return fd4;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string port = fmt::format("{}", a.port);
    if (int rc = ::getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); rc != 0)
        return fail(Code::io, "listening on {}: cannot resolve '{}': {}", text, a.host, ::gai_strerror(rc));
    std::string why;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        auto fd = bind_one(ai->ai_addr, ai->ai_addrlen, ai->ai_family, backlog, false);
        if (fd) {
            ::freeaddrinfo(res);
            return fd;
        }
        why = fd.error().message;
    }
    ::freeaddrinfo(res);
    return fail(Code::io, "listening on {}: {}", text, why);
}

std::string_view reason_phrase(unsigned status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
    }
}

bool is_token_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool equals_ci(std::string_view a, std::string_view b) {
    return a.size() == b.size() && strings::starts_with_ci(a, b);
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// A request head, parsed. status != 0: the request is refused with that status (and closed).
struct Parsed {
    unsigned status = 0;
    std::string why;
    std::string method, path, authorization;
    bool http10 = false, keep_alive = true, accepts_gzip = false, has_body = false;
};

// Parses a complete head (request line and header lines, up to but without the empty line).
// Lines may end in CRLF or LF (as Go's server accepts).
Parsed parse_head(std::string_view head) {
    Parsed p;
    auto refuse = [&](unsigned status, std::string why) {
        p.status = status;
        p.why = std::move(why);
        return p;
    };
    std::vector<std::string_view> lines;
    while (!head.empty()) {
        auto nl = head.find('\n');
        std::string_view line = head.substr(0, nl);
        if (line.ends_with('\r')) line.remove_suffix(1);
        lines.push_back(line);
        if (nl == std::string_view::npos) break;
        head.remove_prefix(nl + 1);
    }
    // Empty lines before the request line are skipped (RFC 9112 2.2).
    std::size_t first = 0;
    while (first < lines.size() && lines[first].empty()) ++first;
    if (first == lines.size()) return refuse(400, "empty request");
    const std::string_view rl = lines[first];
    const auto sp1 = rl.find(' ');
    const auto sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos)
        return refuse(400, "malformed request line");
    const std::string_view method = rl.substr(0, sp1), target = rl.substr(sp1 + 1, sp2 - sp1 - 1),
                           version = rl.substr(sp2 + 1);
    if (method.empty() || !std::ranges::all_of(method, is_token_char)) return refuse(400, "malformed method");
    if (version == "HTTP/1.0") p.http10 = true, p.keep_alive = false;
    else if (version != "HTTP/1.1") {
        if (version.starts_with("HTTP/") && version.size() == 8 && version[5] >= '2' && version[5] <= '9')
            return refuse(505, "only HTTP/1.0 and HTTP/1.1 are served");
        return refuse(400, "malformed HTTP version");
    }
    p.method = std::string(method);

    // The target: origin form "/path?query", absolute form "http://host/path", or "*".
    std::string_view path = target;
    if (path.empty()) return refuse(400, "empty request target");
    if (path != "*" && path.front() != '/') {
        const auto scheme = path.find("://");
        if (scheme == std::string_view::npos) return refuse(400, "malformed request target");
        const auto slash = path.find('/', scheme + 3);
        path = slash == std::string_view::npos ? std::string_view("/") : path.substr(slash);
    }
    if (auto q = path.find_first_of("?#"); q != std::string_view::npos) path = path.substr(0, q);
    p.path.reserve(path.size());
    for (std::size_t i = 0; i < path.size(); ++i) {
        char c = path[i];
        if (c == '%') {
            const int hi = i + 2 < path.size() ? hex_value(path[i + 1]) : -1;
            const int lo = hi >= 0 ? hex_value(path[i + 2]) : -1;
            if (hi < 0 || lo < 0) return refuse(400, "malformed percent-encoding in the path");
            c = static_cast<char>(hi * 16 + lo);
            if (c == '\0') return refuse(400, "NUL in the path");
            i += 2;
        } else if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
            return refuse(400, "control character in the request target");
        }
        p.path += c;
    }

    std::optional<std::string_view> content_length;
    std::size_t headers = 0;
    for (std::size_t i = first + 1; i < lines.size(); ++i) {
        const std::string_view line = lines[i];
        if (line.empty()) break;
        if (++headers > kMaxHeaders) return refuse(431, "more than 100 header fields");
        if (line.front() == ' ' || line.front() == '\t') return refuse(400, "obsolete header line folding");
        const auto colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0) return refuse(400, "malformed header field");
        const std::string_view name = line.substr(0, colon);
        if (!std::ranges::all_of(name, is_token_char)) return refuse(400, "malformed header field name");
        const std::string_view value = strings::trim(line.substr(colon + 1));
        if (equals_ci(name, "Content-Length")) {
            if (value.empty() || !std::ranges::all_of(value, [](char c) { return c >= '0' && c <= '9'; }) ||
                (content_length && *content_length != value))
                return refuse(400, "malformed or conflicting Content-Length");
            content_length = value;
            if (value.find_first_not_of('0') != std::string_view::npos) p.has_body = true;
        } else if (equals_ci(name, "Transfer-Encoding")) {
            p.has_body = true;
        } else if (equals_ci(name, "Connection")) {
            for (auto token : strings::split(value, ',')) {
                token = strings::trim(token);
                if (equals_ci(token, "close")) p.keep_alive = false;
                else if (equals_ci(token, "keep-alive")) p.keep_alive = true;
            }
        } else if (equals_ci(name, "Accept-Encoding")) {
            p.accepts_gzip = p.accepts_gzip || accepts_gzip(value);
        } else if (equals_ci(name, "Authorization")) {
            p.authorization = std::string(value);
        }
    }
    // Bodies are never needed (GET and HEAD only): the answer closes the connection and the
    // body is drained while closing, so it cannot be taken for a pipelined request.
    if (p.has_body) p.keep_alive = false;
    return p;
}

// Where the head ends in `in` (just past the empty line), searching from `from`; 0 if not yet.
std::size_t head_end(std::string_view in, std::size_t from) {
    for (std::size_t i = from; i < in.size(); ++i) {
        if (in[i] != '\n') continue;
        // An empty line: "\n\n" or "\n\r\n" (a first line may be empty too: see parse_head).
        if (i + 1 < in.size() && in[i + 1] == '\n') return i + 2;
        if (i + 2 < in.size() && in[i + 1] == '\r' && in[i + 2] == '\n') return i + 3;
    }
    return 0;
}

std::string base64_decode(std::string_view in, bool& ok) {
    std::string out;
    unsigned buf = 0;
    int bits = 0;
    std::size_t pad = 0;
    ok = in.size() % 4 == 0;
    for (char c : in) {
        int v;
        if (c >= 'A' && c <= 'Z') v = c - 'A';
        else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
        else if (c >= '0' && c <= '9') v = c - '0' + 52;
        else if (c == '+') v = 62;
        else if (c == '/') v = 63;
        else if (c == '=') {
            ++pad;
            continue;
        } else {
            ok = false;
            return {};
        }
        if (pad) ok = false;  // data after padding
        buf = (buf << 6) | static_cast<unsigned>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((buf >> bits) & 0xff);
        }
    }
    if (pad > 2) ok = false;
    return out;
}

std::string http_date() {
    thread_local std::time_t cached_at = 0;
    thread_local std::string cached;
    const std::time_t now = std::time(nullptr);
    if (now != cached_at) {
        std::tm tm{};
        ::gmtime_r(&now, &tm);
        char buf[64];
        std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        cached = buf;
        cached_at = now;
    }
    return cached;
}

// Logs a condition once when it starts, and again only after it has been quiet for a minute.
class Episode {
public:
    bool start(Clock::time_point now) {
        const bool fresh = last_ == Clock::time_point{} || now - last_ > kLogAgainAfter;
        last_ = now;
        return fresh;
    }

private:
    Clock::time_point last_{};
};

enum class Phase : std::uint8_t { closing, idle, handshake, head, auth, writing };

// How expendable a connection is when room is needed: lower goes first.
int rank(Phase p) {
    switch (p) {
    case Phase::closing: return 0;
    case Phase::idle: return 1;
    case Phase::handshake:
    case Phase::head: return 2;
    case Phase::auth:
    case Phase::writing: return 3;
    }
    return 3;
}

using OrderKey = std::tuple<int, Clock::time_point, std::uint64_t>;  // rank, since, id
using TimerKey = std::pair<Clock::time_point, std::uint64_t>;

struct Conn {
    int fd = -1;
    std::uint64_t id = 0;
    std::string peer;  // peer_of() key
    Phase phase = Phase::idle;
    OrderKey order{};
    Clock::time_point deadline{};
    std::string in;              // received, not yet a complete head
    std::size_t scanned = 0;     // in[0, scanned) holds no head end
    std::size_t lingered = 0;    // bytes drained while closing
    std::string out_head;        // the answer being written: head, then body
    std::shared_ptr<const std::string> out_body;
    std::size_t out_pos = 0;     // over head + body
    bool close_after = false;
    std::uint32_t events = 0;    // what epoll watches
    std::unique_ptr<TlsStream> tls;
    bool tls_wants_write = false;  // the last TLS read needs the socket writable (and the reverse)
    bool tls_wants_read = false;
    Parsed pending;              // a request waiting for its password check
};

// Checks bcrypt hashes on its own thread: each takes ~50-100 ms at cost 10, too long for the
// event loop, so a flood of wrong passwords delays only other password checks.
class AuthWorker {
public:
    struct Job {
        std::uint64_t conn;
        std::string key;  // cache key
        std::string password, hash;
        bool known_user;
    };
    struct Done {
        std::uint64_t conn;
        std::string key;
        Result<bool> ok;
    };

    explicit AuthWorker(int wake_fd) : wake_fd_(wake_fd), thread_([this] { run(); }) {}
    ~AuthWorker() {
        {
            std::lock_guard lk(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    bool submit(Job job) {
        std::lock_guard lk(mu_);
        if (jobs_.size() >= kAuthQueue) return false;
        jobs_.push_back(std::move(job));
        cv_.notify_one();
        return true;
    }
    std::vector<Done> take() {
        std::lock_guard lk(mu_);
        return std::exchange(done_, {});
    }

private:
    void run() {
        std::unique_lock lk(mu_);
        for (;;) {
            cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
            if (stop_) return;
            Job job = std::move(jobs_.front());
            jobs_.pop_front();
            lk.unlock();
            // An unknown user is checked against a real hash too, so timing does not tell users apart.
            auto r = bcrypt_matches(job.password, job.hash);
            if (r && !job.known_user) r = false;
            lk.lock();
            done_.push_back(Done{job.conn, std::move(job.key), std::move(r)});
            const std::uint64_t one = 1;
            [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
        }
    }

    int wake_fd_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Job> jobs_;
    std::vector<Done> done_;
    bool stop_ = false;
    std::thread thread_;  // last: starts after the members it uses
};

struct FileStamp {
    ino_t ino = 0;
    off_t size = 0;
    timespec mtime{};
    bool operator==(const FileStamp& o) const {
        return ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec;
    }
};
std::vector<FileStamp> stamps(const std::vector<std::string>& files) {
    std::vector<FileStamp> out;
    for (const auto& f : files) {
        struct stat st{};
        FileStamp s;
        if (::stat(f.c_str(), &st) == 0) s = FileStamp{st.st_ino, st.st_size, st.st_mtim};
        out.push_back(s);
    }
    return out;
}

}  // namespace

struct HttpServer::Impl {
    HttpOptions options;
    HttpHandler handler;
    int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
    std::atomic<bool> stopping{false};
    std::thread thread;
    bool tls_enabled = false;  // fixed at start

    // Web config (server thread only, after start).
    std::optional<WebConfig> web;
    std::shared_ptr<TlsContext> tls;
    std::vector<FileStamp> web_stamps;
    Clock::time_point web_checked{};
    std::string web_error;  // the last reload failure logged
    std::unique_ptr<AuthWorker> auth;
    std::unordered_map<std::string, bool> auth_cache;
    std::deque<std::string> auth_cache_order;
    double tokens = 0;
    Clock::time_point tokens_at{};

    // Connections.
    std::unordered_map<std::uint64_t, std::unique_ptr<Conn>> conns;
    std::vector<std::unique_ptr<Conn>> graveyard;
    std::set<OrderKey> order;
    std::unordered_map<std::string, std::set<OrderKey>> peers;
    std::set<TimerKey> timers;
    std::uint64_t next_id = kFirstConnId;
    bool listen_paused = false;
    Clock::time_point listen_resume{};
    Episode evict_log, peer_log, fd_log;

    // Statistics (read by other threads).
    std::atomic<std::uint64_t> n_open{0}, n_evicted{0}, n_peer{0}, n_timeout{0}, n_oversize{0}, n_malformed{0},
        n_tls{0};

    ~Impl() {
        for (auto& [id, c] : conns) ::close(c->fd);
        if (listen_fd >= 0) ::close(listen_fd);
        if (epoll_fd >= 0) ::close(epoll_fd);
        if (wake_fd >= 0) ::close(wake_fd);
    }

    // ---- bookkeeping --------------------------------------------------------------------------

    void set_events(Conn& c, std::uint32_t ev) {
        if (ev == c.events) return;
        epoll_event e{};
        e.events = ev;
        e.data.u64 = c.id;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &e);
        c.events = ev;
    }

    void set_phase(Conn& c, Phase p, Clock::time_point now, Clock::duration timeout) {
        if (c.fd < 0) return;  // closed earlier in this batch
        order.erase(c.order);
        auto& mine = peers[c.peer];
        mine.erase(c.order);
        timers.erase({c.deadline, c.id});
        c.phase = p;
        c.order = {rank(p), now, c.id};
        c.deadline = now + timeout;
        order.insert(c.order);
        mine.insert(c.order);
        timers.insert({c.deadline, c.id});
        update_events(c);
    }

    // Level-triggered. EPOLLRDHUP is never asked for: a client that half-closes after its request
    // would make it fire at every wait while its answer is written; EOF is seen by recv instead.
    void update_events(Conn& c) {
        if (c.fd < 0) return;
        std::uint32_t ev = 0;
        switch (c.phase) {
        case Phase::closing:
        case Phase::idle:
        case Phase::head: ev |= EPOLLIN; break;
        case Phase::handshake: ev |= c.tls_wants_write ? EPOLLOUT : EPOLLIN; break;
        case Phase::auth: break;
        case Phase::writing: ev |= EPOLLOUT; break;
        }
        if (c.phase != Phase::handshake) {
            if (c.tls_wants_write) ev |= EPOLLOUT;
            if (c.tls_wants_read) ev |= EPOLLIN;
        }
        set_events(c, ev);
    }

    // Closes at once. `counter` says why, when it is a reason worth counting.
    void close_conn(Conn& c, std::atomic<std::uint64_t>* counter) {
        if (counter) ++*counter;
        order.erase(c.order);
        if (auto it = peers.find(c.peer); it != peers.end()) {
            it->second.erase(c.order);
            if (it->second.empty()) peers.erase(it);
        }
        timers.erase({c.deadline, c.id});
        ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
        c.tls.reset();
        ::close(c.fd);
        c.fd = -1;
        auto it = conns.find(c.id);
        graveyard.push_back(std::move(it->second));
        conns.erase(it);
        n_open = conns.size();
    }

    // Closes the most expendable connection of `set` (the global order or one peer's).
    bool evict_from(const std::set<OrderKey>& set, std::atomic<std::uint64_t>& counter) {
        if (set.empty()) return false;
        const auto id = std::get<2>(*set.begin());
        close_conn(*conns.at(id), &counter);
        return true;
    }

    // ---- web config ----------------------------------------------------------------------------

    Status load_web(const std::string& path) {
        auto cfg = load_web_config(path);
        if (!cfg) return std::unexpected(cfg.error());
        std::shared_ptr<TlsContext> ctx;
        if (cfg->tls) {
            auto c = TlsContext::create(*cfg->tls);
            if (!c) return std::unexpected(c.error().context(path));
            ctx = std::move(*c);
        }
        if (!cfg->users.empty()) {
            if (auto s = load_bcrypt(); !s) return std::unexpected(s.error().context(path));
        }
        if (web && static_cast<bool>(web->tls) != static_cast<bool>(cfg->tls))
            return fail(Code::invalid_argument, "{}: switching TLS on or off needs a restart of the exporter", path);
        if (!cfg->users.empty() && !auth) auth = std::make_unique<AuthWorker>(wake_fd);
        if (!web || web->rate_interval != cfg->rate_interval || web->rate_burst != cfg->rate_burst) {
            tokens = cfg->rate_burst;
            tokens_at = Clock::now();
        }
        web_stamps = stamps(cfg->files);
        web = std::move(*cfg);
        tls = std::move(ctx);
        auth_cache.clear();
        auth_cache_order.clear();
        return {};
    }

    // The toolkit re-reads its config for every request and its certificates for every
    // connection; here the files are checked at most once a second, as connections arrive, and
    // re-read when one changed (a rotated certificate). A broken new version keeps the old one.
    void maybe_reload(Clock::time_point now) {
        if (!web || now - web_checked < std::chrono::seconds(1)) return;
        web_checked = now;
        if (stamps(web->files) == web_stamps) return;
        const std::string path = web->path;
        if (auto s = load_web(path); !s) {
            web_stamps = stamps(web->files);  // do not retry until it changes again
            if (s.error().message != web_error) log::error("exporter: web config not reloaded, keeping the previous one: {}", s.error().message);
            web_error = s.error().message;
            return;
        }
        web_error.clear();
        log::info("exporter: web config {} reloaded", path);
    }

    // ---- accepting -----------------------------------------------------------------------------

    void on_accept(Clock::time_point now) {
        maybe_reload(now);
        for (int i = 0; i < 256; ++i) {  // then let the connections' events in
            sockaddr_storage ss{};
            socklen_t len = sizeof ss;
            int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                if (errno == EMFILE || errno == ENFILE) {
                    // Out of file descriptors: make room from our own connections, or pause.
                    if (fd_log.start(now))
                        log::warn("exporter: http: out of file descriptors with {} connections open ({}); closing the "
                                  "oldest idle ones",
                                  conns.size(), std::strerror(errno));
                    if (evict_from(order, n_evicted)) continue;
                    pause_listen(now);
                }
                return;  // EAGAIN: all taken
            }
            admit(fd, ss, now);
        }
    }

    void pause_listen(Clock::time_point now) {
        epoll_event e{};
        e.data.u64 = kListenId;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &e);
        listen_paused = true;
        listen_resume = now + std::chrono::milliseconds(100);
    }

    void admit(int fd, const sockaddr_storage& ss, Clock::time_point now) {
        auto [peer, peer_text] = peer_of(ss);
        // Room first: the new connection never waits, the most expendable old one goes.
        if (auto it = peers.find(peer); it != peers.end() && it->second.size() >= options.peer_connection_limit) {
            if (peer_log.start(now))
                log::warn("exporter: http: {} holds {} connections, the per-client limit: closing its oldest idle or "
                          "slowest ones (kgpu_exporter_http_connections_closed_total{{reason=\"peer_limit\"}})",
                          peer_text, it->second.size());
            evict_from(it->second, n_peer);
        }
        while (conns.size() >= options.connection_limit) {
            if (evict_log.start(now))
                log::warn("exporter: http: {} connections open, the limit: closing the oldest idle or slowest ones to "
                          "make room (kgpu_exporter_http_connections_closed_total{{reason=\"evicted\"}})",
                          conns.size());
            if (!evict_from(order, n_evicted)) break;
        }
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        auto c = std::make_unique<Conn>();
        c->fd = fd;
        c->id = next_id++;
        c->peer = std::move(peer);
        c->order = {0, now, c->id};
        c->deadline = now;
        epoll_event e{};
        e.events = EPOLLIN;
        e.data.u64 = c->id;
        if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &e) != 0) {
            ::close(fd);
            return;
        }
        c->events = e.events;
        Conn& ref = *c;
        conns.emplace(ref.id, std::move(c));
        n_open = conns.size();
        peers[ref.peer];  // set_phase indexes it
        if (tls) {
            // The handshake is part of the first request: it gets request_timeout.
            set_phase(ref, Phase::handshake, now, options.request_timeout);
        } else {
            set_phase(ref, Phase::idle, now, options.idle_timeout);
        }
    }

    // ---- reading -------------------------------------------------------------------------------

    // Reads what is there. Returns false when the connection was closed.
    bool on_readable(Conn& c, Clock::time_point now) {
        char buf[16384];
        if (c.phase == Phase::closing) {
            for (;;) {
                const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
                if (n > 0 && (c.lingered += static_cast<std::size_t>(n)) <= kMaxLingerBytes) continue;
                if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
                close_conn(c, nullptr);
                return false;
            }
        }
        if (c.phase == Phase::handshake) return handshake(c, now);
        if (c.phase != Phase::idle && c.phase != Phase::head) return true;
        for (;;) {
            std::size_t n = 0;
            if (c.tls) {
                c.tls_wants_write = false;
                auto r = c.tls->read(buf, sizeof buf, n);
                if (r == TlsStream::Io::want_read) break;
                if (r == TlsStream::Io::want_write) {
                    c.tls_wants_write = true;
                    break;
                }
                if (r != TlsStream::Io::ok) {
                    close_conn(c, nullptr);
                    return false;
                }
            } else {
                const ssize_t got = ::recv(c.fd, buf, sizeof buf, 0);
                if (got < 0 && (errno == EAGAIN || errno == EINTR)) break;
                if (got <= 0) {
                    close_conn(c, nullptr);  // the client went away (a half-sent head is dropped)
                    return false;
                }
                n = static_cast<std::size_t>(got);
            }
            if (c.phase == Phase::idle) set_phase(c, Phase::head, now, options.request_timeout);
            c.in.append(buf, n);
            if (!process(c, now) || c.fd < 0) return false;
            if (c.phase != Phase::idle && c.phase != Phase::head) return true;
        }
        update_events(c);
        return true;
    }

    bool handshake(Conn& c, Clock::time_point now) {
        if (!c.tls) {
            // The first bytes decide: a TLS handshake starts with record type 22. A plain HTTP
            // request gets Go's answer (dcgm-exporter's test expects the 400).
            unsigned char first = 0;
            const ssize_t n = ::recv(c.fd, &first, 1, MSG_PEEK);
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
            if (n <= 0) {
                close_conn(c, nullptr);
                return false;
            }
            if (first != 0x16) {
                static constexpr std::string_view kPlain =
                    "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";
                [[maybe_unused]] auto w = ::send(c.fd, kPlain.data(), kPlain.size(), MSG_NOSIGNAL);
                ++n_tls;
                begin_close(c, now);
                return true;
            }
            c.tls = tls->accept(c.fd);
            if (!c.tls) {
                close_conn(c, &n_tls);
                return false;
            }
        }
        c.tls_wants_write = false;
        switch (c.tls->handshake()) {
        case TlsStream::Io::ok:
            // As after an answer: idle until the request's first byte, which may already be in.
            set_phase(c, Phase::idle, now, options.idle_timeout);
            return on_readable(c, now);
        case TlsStream::Io::want_read: update_events(c); return true;
        case TlsStream::Io::want_write:
            c.tls_wants_write = true;
            update_events(c);
            return true;
        case TlsStream::Io::closed:
        case TlsStream::Io::error:
            log::debug("exporter: http: {}", c.tls->error().empty() ? "TLS handshake: the client closed" : c.tls->error());
            close_conn(c, &n_tls);
            return false;
        }
        return true;
    }

    // Takes complete heads out of c.in and answers them, one at a time. Returns false when the
    // connection was closed.
    bool process(Conn& c, Clock::time_point now) {
        while (c.fd >= 0 && (c.phase == Phase::idle || c.phase == Phase::head)) {
            if (c.in.empty()) return true;
            const std::size_t end = head_end(c.in, c.scanned > 2 ? c.scanned - 2 : 0);
            if (end == 0) {
                c.scanned = c.in.size();
                if (c.in.size() > kMaxHead) {
                    ++n_oversize;
                    error_answer(c, 431, "request head larger than 8 KiB\n", now);
                }
                return true;
            }
            if (end > kMaxHead + 2) {
                ++n_oversize;
                error_answer(c, 431, "request head larger than 8 KiB\n", now);
                return true;
            }
            if (c.phase == Phase::idle) set_phase(c, Phase::head, now, options.request_timeout);
            Parsed p = parse_head(std::string_view(c.in).substr(0, end));
            c.in.erase(0, end);
            c.scanned = 0;
            if (p.status != 0) {
                ++n_malformed;
                error_answer(c, p.status, p.why + "\n", now);
                return true;
            }
            dispatch(c, std::move(p), now);
        }
        return true;
    }

    // ---- answering -----------------------------------------------------------------------------

    bool rate_limited(Clock::time_point now) {
        if (!web || web->rate_interval.count() == 0) return false;
        const double per_second = 1e9 / static_cast<double>(web->rate_interval.count());
        tokens = std::min<double>(web->rate_burst,
                                  tokens + std::chrono::duration<double>(now - tokens_at).count() * per_second);
        tokens_at = now;
        if (tokens < 1) return true;
        tokens -= 1;
        return false;
    }

    void dispatch(Conn& c, Parsed p, Clock::time_point now) {
        if (rate_limited(now)) {
            answer(c, HttpResponse::text(429, "Too Many Requests\n"), p, now);
            return;
        }
        if (web && !web->users.empty()) {
            std::string_view a = p.authorization;
            bool ok = false;
            std::string creds;
            if (strings::starts_with_ci(a, "basic ")) creds = base64_decode(strings::trim(a.substr(6)), ok);
            const auto colon = creds.find(':');
            if (!ok || colon == std::string::npos) {
                unauthorized(c, p, now);
                return;
            }
            const std::string user = creds.substr(0, colon), password = creds.substr(colon + 1);
            auto known = web->users.find(user);
            const std::string& hash = known != web->users.end() ? known->second : web->users.begin()->second;
            const std::string key = fmt::format("{}\n{}\n{}", user, hash, password);
            if (auto hit = auth_cache.find(key); hit != auth_cache.end()) {
                if (!hit->second) {
                    unauthorized(c, p, now);
                    return;
                }
            } else {
                if (!auth->submit({c.id, key, password, hash, known != web->users.end()})) {
                    auto r = HttpResponse::text(503, "too many password checks waiting; try again\n");
                    r.headers.emplace_back("Retry-After", "1");
                    answer(c, std::move(r), p, now);
                    return;
                }
                c.pending = std::move(p);
                set_phase(c, Phase::auth, now, options.request_timeout);
                return;
            }
        }
        serve(c, p, now);
    }

    void unauthorized(Conn& c, const Parsed& p, Clock::time_point now) {
        auto r = HttpResponse::text(401, "Unauthorized\n");
        r.headers.emplace_back("WWW-Authenticate", "Basic");
        answer(c, std::move(r), p, now);
    }

    void serve(Conn& c, const Parsed& p, Clock::time_point now) {
        HttpRequest req;
        req.method = p.method;
        req.path = p.path;
        req.accepts_gzip = p.accepts_gzip;
        HttpResponse r;
        try {
            r = handler(req);
        } catch (const std::exception& e) {  // nothing throws across the server boundary
            log::error("exporter: http handler failed: {}", e.what());
            r = HttpResponse::text(500, "internal error\n");
        }
        answer(c, std::move(r), p, now);
    }

    void on_auth_done(Clock::time_point now) {
        if (!auth) return;
        for (auto& d : auth->take()) {
            if (!d.ok) {
                log::error("exporter: http: {}", d.ok.error().message);
            } else {
                if (auth_cache.size() >= kAuthCache && !auth_cache_order.empty()) {
                    auth_cache.erase(auth_cache_order.front());
                    auth_cache_order.pop_front();
                }
                if (auth_cache.emplace(d.key, *d.ok).second) auth_cache_order.push_back(d.key);
            }
            auto it = conns.find(d.conn);
            if (it == conns.end() || it->second->phase != Phase::auth) continue;
            Conn& c = *it->second;
            Parsed p = std::move(c.pending);
            if (!d.ok) answer(c, HttpResponse::text(500, "Internal Server Error\n"), p, now);
            else if (*d.ok) serve(c, p, now);
            else unauthorized(c, p, now);
            resume(c, now);
        }
    }

    // A refusal that ends the connection.
    void error_answer(Conn& c, unsigned status, std::string text, Clock::time_point now) {
        Parsed p;
        p.keep_alive = false;
        answer(c, HttpResponse::text(status, std::move(text)), p, now);
    }

    void answer(Conn& c, HttpResponse r, const Parsed& p, Clock::time_point now) {
        const bool head_only = p.method == "HEAD";
        const std::size_t length = r.body ? r.body->size() : 0;
        c.close_after = !p.keep_alive || stopping;
        std::string& h = c.out_head;
        h.clear();
        h += fmt::format("HTTP/1.1 {} {}\r\nDate: {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", r.status,
                         reason_phrase(r.status), http_date(), r.content_type, length);
        if (r.gzip) h += "Content-Encoding: gzip\r\n";
        for (const auto& [k, v] : r.headers) h += fmt::format("{}: {}\r\n", k, v);
        if (web)
            for (const auto& [k, v] : web->headers) h += fmt::format("{}: {}\r\n", k, v);
        if (c.close_after) h += "Connection: close\r\n";
        else if (p.http10) h += "Connection: keep-alive\r\n";
        h += "\r\n";
        c.out_body = head_only ? nullptr : std::move(r.body);
        c.out_pos = 0;
        set_phase(c, Phase::writing, now, options.request_timeout);
        on_writable(c, now);
    }

    // Writes what the socket takes. Returns false when the connection was closed.
    bool on_writable(Conn& c, Clock::time_point now) {
        if (c.phase == Phase::handshake) return handshake(c, now);
        if (c.phase != Phase::writing) {
            // A TLS read that wanted the socket writable.
            if (c.tls_wants_write && (c.phase == Phase::idle || c.phase == Phase::head)) return on_readable(c, now);
            return true;
        }
        const std::size_t body_size = c.out_body ? c.out_body->size() : 0;
        const std::size_t total = c.out_head.size() + body_size;
        while (c.out_pos < total) {
            std::size_t n = 0;
            if (c.tls) {
                const char* data;
                std::size_t len;
                if (c.out_pos < c.out_head.size()) {
                    data = c.out_head.data() + c.out_pos;
                    len = c.out_head.size() - c.out_pos;
                } else {
                    data = c.out_body->data() + (c.out_pos - c.out_head.size());
                    len = total - c.out_pos;
                }
                c.tls_wants_read = false;
                auto r = c.tls->write(data, len, n);
                if (r == TlsStream::Io::want_write) break;
                if (r == TlsStream::Io::want_read) {
                    c.tls_wants_read = true;
                    break;
                }
                if (r != TlsStream::Io::ok) {
                    close_conn(c, nullptr);
                    return false;
                }
            } else {
                iovec iov[2];
                int count = 0;
                if (c.out_pos < c.out_head.size()) {
                    iov[count++] = {c.out_head.data() + c.out_pos, c.out_head.size() - c.out_pos};
                    if (body_size) iov[count++] = {const_cast<char*>(c.out_body->data()), body_size};
                } else {
                    const std::size_t off = c.out_pos - c.out_head.size();
                    iov[count++] = {const_cast<char*>(c.out_body->data()) + off, body_size - off};
                }
                msghdr msg{};
                msg.msg_iov = iov;
                msg.msg_iovlen = static_cast<std::size_t>(count);
                const ssize_t w = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL);
                if (w < 0 && (errno == EAGAIN || errno == EINTR)) break;
                if (w <= 0) {
                    close_conn(c, nullptr);
                    return false;
                }
                n = static_cast<std::size_t>(w);
            }
            c.out_pos += n;
        }
        if (c.out_pos < total) {
            update_events(c);
            return true;
        }
        // Done. A pipelined request already received is taken by the caller's loop (process, or
        // resume): never from here, so a stream of pipelined requests does not recurse.
        c.out_body.reset();
        c.out_head.clear();
        c.out_head.shrink_to_fit();
        if (c.close_after) {
            begin_close(c, now);
            return true;
        }
        if (c.in.empty()) {
            c.in.shrink_to_fit();
            set_phase(c, Phase::idle, now, options.idle_timeout);
        } else {
            set_phase(c, Phase::head, now, options.request_timeout);
        }
        return true;
    }

    // After an answer finished outside the reading loop (the socket became writable, a password
    // check came back, a timer): take what is already received. TLS may also hold decrypted bytes
    // epoll cannot see, so it is read too.
    void resume(Conn& c, Clock::time_point now) {
        if (c.fd < 0 || (c.phase != Phase::idle && c.phase != Phase::head)) return;
        if (!c.in.empty() && !process(c, now)) return;
        if (c.fd >= 0 && c.tls && (c.phase == Phase::idle || c.phase == Phase::head)) on_readable(c, now);
    }

    // Ends the connection politely: close_notify and FIN, then reads (and drops) what the client
    // still sends for a moment, so our answer is not destroyed by a reset.
    void begin_close(Conn& c, Clock::time_point now) {
        if (c.tls) c.tls->shutdown();
        c.tls.reset();
        c.tls_wants_read = c.tls_wants_write = false;
        ::shutdown(c.fd, SHUT_WR);
        c.in.clear();
        c.in.shrink_to_fit();
        set_phase(c, Phase::closing, now, kLinger);
    }

    void on_timer(Conn& c, Clock::time_point now) {
        switch (c.phase) {
        case Phase::closing:
        case Phase::idle: close_conn(c, nullptr); return;
        case Phase::auth: {
            const Parsed p = std::move(c.pending);
            answer(c, HttpResponse::text(503, "the password check took too long\n"), p, now);
            ++n_timeout;
            resume(c, now);
            return;
        }
        case Phase::handshake:
        case Phase::head:
        case Phase::writing: close_conn(c, &n_timeout); return;
        }
    }

    // ---- the loop ------------------------------------------------------------------------------

    void run() {
        // OpenSSL writes with write(2), which raises SIGPIPE when a client has gone: keep it
        // pending on this thread (write then fails with EPIPE) instead of killing the process.
        sigset_t pipe;
        sigemptyset(&pipe);
        sigaddset(&pipe, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
        std::vector<epoll_event> events(256);
        while (!stopping) {
            int timeout_ms = 1000;
            const auto now0 = Clock::now();
            if (!timers.empty()) {
                const auto wait = std::chrono::ceil<std::chrono::milliseconds>(timers.begin()->first - now0).count();
                timeout_ms = static_cast<int>(std::clamp<long long>(wait, 0, 1000));
            }
            if (listen_paused) timeout_ms = std::min(timeout_ms, 100);
            const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), timeout_ms);
            if (n < 0 && errno != EINTR) {
                log::error("exporter: http: epoll_wait: {}", std::strerror(errno));
                return;
            }
            const auto now = Clock::now();
            for (int i = 0; i < n; ++i) {
                const std::uint64_t id = events[i].data.u64;
                const std::uint32_t ev = events[i].events;
                if (id == kListenId) {
                    on_accept(now);
                    continue;
                }
                if (id == kWakeId) {
                    std::uint64_t v;
                    [[maybe_unused]] auto r = ::read(wake_fd, &v, sizeof v);
                    on_auth_done(now);
                    continue;
                }
                auto it = conns.find(id);
                if (it == conns.end()) continue;  // closed earlier in this batch
                Conn& c = *it->second;
                if (ev & EPOLLERR) {
                    close_conn(c, nullptr);
                    continue;
                }
                if (ev & EPOLLOUT) {
                    const bool was_writing = c.phase == Phase::writing;
                    if (!on_writable(c, now) || c.fd < 0) continue;
                    if (was_writing) resume(c, now);
                    if (c.fd < 0) continue;
                }
                if (ev & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) {
                    if (c.phase == Phase::writing && c.tls_wants_read) {
                        on_writable(c, now);  // a TLS write that needed to read first
                        if (c.fd >= 0) resume(c, now);
                        continue;
                    }
                    if (c.phase == Phase::auth || c.phase == Phase::writing) {
                        // Not reading now; a client that hung up entirely is let go.
                        if (ev & EPOLLHUP) close_conn(c, nullptr);
                        continue;
                    }
                    on_readable(c, now);
                }
            }
            graveyard.clear();
            const auto later = Clock::now();
            while (!timers.empty() && timers.begin()->first <= later) {
                const auto id = timers.begin()->second;
                on_timer(*conns.at(id), later);
            }
            graveyard.clear();
            if (listen_paused && later >= listen_resume) {
                epoll_event e{};
                e.events = EPOLLIN;
                e.data.u64 = kListenId;
                ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &e);
                listen_paused = false;
            }
        }
    }
};

Status check_web_config(const std::string& path) {
    auto cfg = load_web_config(path);
    if (!cfg) return std::unexpected(cfg.error());
    if (cfg->tls) {
        auto ctx = TlsContext::create(*cfg->tls);
        if (!ctx) return std::unexpected(ctx.error().context(path));
    }
    if (!cfg->users.empty()) {
        if (auto s = load_bcrypt(); !s) return std::unexpected(s.error().context(path));
    }
    return {};
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpOptions& options, HttpHandler handler) {
    auto addr = parse_listen_address(options.address);
    if (!addr) return std::unexpected(addr.error());
    std::unique_ptr<HttpServer> server(new HttpServer());
    server->impl_ = std::make_unique<Impl>();
    Impl& im = *server->impl_;
    im.options = options;
    im.options.connection_limit = std::max(1u, options.connection_limit);
    im.options.peer_connection_limit = std::max(1u, options.peer_connection_limit);
    im.handler = std::move(handler);
    im.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    im.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (im.wake_fd < 0 || im.epoll_fd < 0) return fail(Code::io, "listening on {}: {}", options.address, std::strerror(errno));
    if (!options.web_config_file.empty()) {
        if (auto s = im.load_web(options.web_config_file); !s) return std::unexpected(s.error());
        im.tls_enabled = im.tls != nullptr;
    }

    auto fd = listen_on(*addr, options.listen_backlog, options.address);
    if (!fd) return std::unexpected(fd.error());
    im.listen_fd = *fd;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(im.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
        return fail(Code::io, "listening on {}: getsockname: {}", options.address, std::strerror(errno));
    server->bound_ = numeric(ss);
    server->port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = kListenId;
    ::epoll_ctl(im.epoll_fd, EPOLL_CTL_ADD, im.listen_fd, &e);
    e.data.u64 = kWakeId;
    ::epoll_ctl(im.epoll_fd, EPOLL_CTL_ADD, im.wake_fd, &e);
    im.thread = std::thread([&im] { im.run(); });
    return server;
}

HttpServer::~HttpServer() {
    if (!impl_) return;
    impl_->stopping = true;
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(impl_->wake_fd, &one, sizeof one);
    if (impl_->thread.joinable()) impl_->thread.join();
    impl_->auth.reset();
}

bool HttpServer::tls() const { return impl_ && impl_->tls_enabled; }

HttpServerStats HttpServer::stats() const {
    const Impl& im = *impl_;
    return HttpServerStats{im.n_open.load(),    im.n_evicted.load(),   im.n_peer.load(), im.n_timeout.load(),
                           im.n_oversize.load(), im.n_malformed.load(), im.n_tls.load()};
}

}  // namespace kgpu::exporter
