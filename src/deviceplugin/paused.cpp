#include "deviceplugin/paused.h"

#include <fmt/format.h>

namespace kgpu::deviceplugin {

Result<std::set<std::string>> parse_paused_gpus(std::string_view text, const std::string& source) {
    std::set<std::string> out;
    std::size_t line_no = 0;
    while (!text.empty()) {
        ++line_no;
        const auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
        while (!line.empty() && (line.front() == ' ' || line.front() == '\t' || line.front() == '\r')) line.remove_prefix(1);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.remove_suffix(1);
        if (line.empty()) continue;
        bool ok = line.size() > 4 && line.size() <= 96 && line.starts_with("GPU-");
        for (std::size_t i = 4; ok && i < line.size(); ++i) {
            const char c = line[i];
            ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-';
        }
        if (!ok) {
            const std::string shown(line.substr(0, 64));
            return std::unexpected(Error{Code::parse, fmt::format("{}:{}: '{}': expected a GPU UUID (GPU-<hex digits and dashes>) "
                                                                  "per line",
                                                                  source, line_no, shown)});
        }
        out.emplace(line);
    }
    return out;
}

std::string paused_gpus_text(const std::set<std::string>& uuids, std::string_view why) {
    std::string out = fmt::format("# GPUs the kgpu device plugin does not offer: {}\n", why);
    for (const auto& u : uuids) out += u + "\n";
    return out;
}

}  // namespace kgpu::deviceplugin
