#include "metrics_text.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

namespace kgpu::test {

std::optional<std::string> ParsedSample::label(std::string_view n) const {
    for (const auto& [k, v] : labels)
        if (k == n) return v;
    return std::nullopt;
}

std::vector<const ParsedSample*> ParsedMetrics::find(std::string_view name,
                                                     const std::map<std::string, std::string>& want) const {
    std::vector<const ParsedSample*> out;
    for (const auto& s : samples) {
        if (s.name != name) continue;
        bool ok = true;
        for (const auto& [k, v] : want)
            if (s.label(k) != v) ok = false;
        if (ok) out.push_back(&s);
    }
    return out;
}

std::optional<double> ParsedMetrics::value(std::string_view name, const std::map<std::string, std::string>& want) const {
    auto f = find(name, want);
    if (f.size() != 1) return std::nullopt;
    return f[0]->value;
}

namespace {

bool name_char(char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}

}  // namespace

ParsedMetrics parse_metrics(std::string_view text) {
    ParsedMetrics out;
    if (!text.empty() && text.back() != '\n') out.errors.push_back("text does not end with a newline");
    std::set<std::string> finished;  // families whose samples ended
    std::set<std::string> seen_keys;
    std::string current;
    size_t pos = 0, line_no = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        std::string_view line = text.substr(pos, nl - pos);
        pos = nl + 1;
        ++line_no;
        auto err = [&](std::string what) { out.errors.push_back("line " + std::to_string(line_no) + ": " + what + ": " + std::string(line)); };
        if (line.empty()) continue;
        if (line[0] == '#') {
            bool help = line.starts_with("# HELP "), type = line.starts_with("# TYPE ");
            if (!help && !type) continue;
            std::string_view rest = line.substr(7);
            auto sp = rest.find(' ');
            std::string name(rest.substr(0, sp));
            std::string arg = sp == std::string_view::npos ? "" : std::string(rest.substr(sp + 1));
            auto& map = help ? out.help : out.type;
            if (map.count(name)) err("second " + std::string(help ? "HELP" : "TYPE") + " for " + name);
            if (finished.count(name) || (current == name && !out.samples.empty() && out.samples.back().name == name))
                err("HELP/TYPE after samples of " + name);
            map[name] = arg;
            if (current != name) {
                if (!current.empty()) finished.insert(current);
                current = name;
            }
            continue;
        }
        ParsedSample s;
        s.line = std::string(line);
        size_t i = 0;
        while (i < line.size() && name_char(line[i], i == 0)) ++i;
        s.name = std::string(line.substr(0, i));
        if (s.name.empty()) {
            err("no metric name");
            continue;
        }
        if (i < line.size() && line[i] == '{') {
            ++i;
            bool ok = true;
            while (i < line.size() && line[i] != '}') {
                size_t start = i;
                while (i < line.size() && name_char(line[i], i == start) && line[i] != ':') ++i;
                std::string lname(line.substr(start, i - start));
                if (lname.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
                    ok = false;
                    break;
                }
                i += 2;
                std::string value;
                while (i < line.size() && line[i] != '"') {
                    if (line[i] == '\\') {
                        if (i + 1 >= line.size()) break;
                        char e = line[i + 1];
                        if (e == 'n') value += '\n';
                        else if (e == '\\' || e == '"') value += e;
                        else ok = false;
                        i += 2;
                    } else {
                        value += line[i++];
                    }
                }
                if (i >= line.size()) {
                    ok = false;
                    break;
                }
                ++i;  // closing quote
                s.labels.emplace_back(lname, value);
                if (i < line.size() && line[i] == ',') ++i;
            }
            if (!ok || i >= line.size()) {
                err("malformed labels");
                continue;
            }
            ++i;  // '}'
        }
        if (i >= line.size() || line[i] != ' ') {
            err("no space before the value");
            continue;
        }
        std::string value(line.substr(i + 1));
        if (auto sp = value.find(' '); sp != std::string::npos) value = value.substr(0, sp);  // timestamp
        if (value == "NaN") s.value = std::nan("");
        else if (value == "+Inf") s.value = INFINITY;
        else if (value == "-Inf") s.value = -INFINITY;
        else {
            char* end = nullptr;
            s.value = std::strtod(value.c_str(), &end);
            if (value.empty() || *end != '\0') {
                err("bad value");
                continue;
            }
        }
        if (s.name != current) {
            if (finished.count(s.name)) err("samples of " + s.name + " are not contiguous");
            if (!current.empty()) finished.insert(current);
            current = s.name;
        }
        std::string key = s.name + "{";
        for (const auto& [k, v] : s.labels) key += k + "=" + v + ",";
        if (!seen_keys.insert(key).second) err("duplicate series");
        out.samples.push_back(std::move(s));
    }
    return out;
}

int connect_loopback(int port, const char* source_ip) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (source_ip) {
        sockaddr_in src{};
        src.sin_family = AF_INET;
        if (::inet_pton(AF_INET, source_ip, &src.sin_addr) != 1 ||
            ::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
            ::close(fd);
            return -1;
        }
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

HttpResult split_http_answer(const std::string& data) {
    HttpResult r;
    auto end = data.find("\r\n\r\n");
    if (end == std::string::npos || !data.starts_with("HTTP/1.")) return r;
    r.status = std::atoi(data.c_str() + 9);
    std::string_view head(data.data(), end);
    size_t p = head.find("\r\n");
    while (p != std::string_view::npos && p < head.size()) {
        size_t q = head.find("\r\n", p + 2);
        std::string_view h = head.substr(p + 2, (q == std::string_view::npos ? head.size() : q) - p - 2);
        if (auto c = h.find(':'); c != std::string_view::npos) {
            std::string k(h.substr(0, c));
            for (auto& ch : k) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            std::string_view v = h.substr(c + 1);
            while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
            r.headers[k] = std::string(v);
        }
        p = q;
    }
    r.body = data.substr(end + 4);
    return r;
}

HttpResult http_request(int port, std::string_view method, std::string_view path,
                        const std::vector<std::string>& extra_headers, int timeout_ms) {
    HttpResult r;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    int fd = connect_loopback(port);
    if (fd < 0) return r;
    std::string req = std::string(method) + " " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
    for (const auto& h : extra_headers) req += h + "\r\n";
    req += "\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
        ::close(fd);
        return r;
    }
    std::string data;
    char buf[65536];
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) {
            ::close(fd);
            return r;
        }
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        data.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    r = split_http_answer(data);
    if (r.status == 0) return r;
    // Chunked bodies (kgpu always sends Content-Length; other servers may not).
    if (r.headers["transfer-encoding"] == "chunked") {
        std::string out;
        size_t i = 0;
        while (i < r.body.size()) {
            size_t e = r.body.find("\r\n", i);
            if (e == std::string::npos) break;
            size_t len = std::strtoul(r.body.c_str() + i, nullptr, 16);
            if (len == 0) break;
            out += r.body.substr(e + 2, len);
            i = e + 2 + len + 2;
        }
        r.body = out;
    }
    return r;
}

std::optional<std::string> gunzip(std::string_view data) {
    z_stream zs{};
    if (inflateInit2(&zs, 15 + 16) != Z_OK) return std::nullopt;
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
    zs.avail_in = static_cast<uInt>(data.size());
    std::string out;
    char buf[65536];
    int rc = Z_OK;
    while (rc == Z_OK) {
        zs.next_out = reinterpret_cast<Bytef*>(buf);
        zs.avail_out = sizeof buf;
        rc = inflate(&zs, Z_NO_FLUSH);
        out.append(buf, sizeof buf - zs.avail_out);
    }
    inflateEnd(&zs);
    if (rc != Z_STREAM_END) return std::nullopt;
    return out;
}

std::string url_encode(std::string_view s) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
        if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += kHex[c >> 4];
            out += kHex[c & 15];
        }
    }
    return out;
}

}  // namespace kgpu::test
