#include "exporter/web_reload.h"

#include <sys/stat.h>

namespace kgpu::exporter {

std::vector<WebReload::Stamp> WebReload::stamps(const std::vector<std::string>& files) {
    std::vector<Stamp> out;
    for (const auto& f : files) {
        struct stat st{};
        Stamp s;
        if (::stat(f.c_str(), &st) == 0) s = Stamp{st.st_ino, st.st_size, st.st_mtim};
        out.push_back(s);
    }
    return out;
}

bool WebReload::due(const std::vector<std::string>& files, Clock::time_point now) {
    if (checked_ != Clock::time_point{} && now - checked_ < std::chrono::seconds(1)) return false;
    checked_ = now;
    return !(stamps(files) == stamps_);
}

bool WebReload::failed(const std::vector<std::string>& files, const std::string& error) {
    stamps_ = stamps(files);
    if (error == error_) return false;
    error_ = error;
    return true;
}

}  // namespace kgpu::exporter
