// When the exporter re-reads its web config (http.cpp). The toolkit re-reads its config for
// every request and its certificates for every connection; kgpu looks at the files (the config
// and every file it names) at most once a second, as connections arrive, and re-reads them when
// one changed (a rotated certificate). A version that fails to load keeps the previous one, is
// not retried until a file changes again, and its error is logged once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <ctime>
#include <string>
#include <vector>

namespace kgpu::exporter {

class WebReload {
public:
    using Clock = std::chrono::steady_clock;

    // `files` were just loaded.
    void loaded(const std::vector<std::string>& files) { stamps_ = stamps(files); }
    // Whether to re-read now: a second has passed since the last look, and one of `files` (those
    // loaded last) changed since it was loaded or since the last failed reload.
    bool due(const std::vector<std::string>& files, Clock::time_point now);
    // The re-read failed with `error`: not again until `files` change. True when `error` is not
    // the one reported last (the caller logs it).
    bool failed(const std::vector<std::string>& files, const std::string& error);
    // The re-read worked: the next failure is reported whatever it says.
    void succeeded() { error_.clear(); }

private:
    struct Stamp {
        ino_t ino = 0;
        off_t size = 0;
        timespec mtime{};
        bool operator==(const Stamp& o) const {
            return ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec;
        }
    };
    static std::vector<Stamp> stamps(const std::vector<std::string>& files);

    std::vector<Stamp> stamps_;
    Clock::time_point checked_{};
    std::string error_;  // the failure reported last
};

}  // namespace kgpu::exporter
