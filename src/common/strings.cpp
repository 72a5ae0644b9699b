#include "common/strings.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace kgpu::strings {

std::string_view trim(std::string_view s) {
    const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    while (!s.empty() && blank(s.front())) s.remove_prefix(1);
    while (!s.empty() && blank(s.back())) s.remove_suffix(1);
    return s;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::string upper(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return out;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    size_t start = 0;
    for (;;) {
        size_t pos = s.find(sep, start);
        if (pos == std::string_view::npos) {
            out.push_back(s.substr(start));
            return out;
        }
        out.push_back(s.substr(start, pos - start));
        start = pos + 1;
    }
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
    if (s.size() < prefix.size()) return false;
    for (size_t i = 0; i < prefix.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i])))
            return false;
    }
    return true;
}

std::optional<std::vector<unsigned long>> version_parts(std::string_view v) {
    if (v.starts_with('v')) v.remove_prefix(1);
    if (v.empty()) return std::nullopt;
    std::vector<unsigned long> out;
    for (auto p : split(v, '.')) {
        unsigned long n = 0;
        auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), n);
        if (p.empty() || ec != std::errc{} || ptr != p.data() + p.size()) return std::nullopt;
        out.push_back(n);
    }
    return out;
}

int compare_versions(const std::vector<unsigned long>& a, const std::vector<unsigned long>& b) {
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
        const unsigned long x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
        if (x != y) return x < y ? -1 : 1;
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

}  // namespace kgpu::strings
