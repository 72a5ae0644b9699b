// Basic auth's password checks off the event loop (internal to src/exporter's HTTP server).
#pragma once

#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "exporter/web_config.h"

namespace kgpu::exporter {

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

    // `wake_fd`: an eventfd written once per finished check; at most `queue` checks wait.
    AuthWorker(int wake_fd, std::size_t queue) : wake_fd_(wake_fd), queue_(queue), thread_([this] { run(); }) {}
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
        if (jobs_.size() >= queue_) return false;
        jobs_.push_back(std::move(job));
        cv_.notify_one();
        return true;
    }
    std::vector<Done> take() {
        std::lock_guard lk(mu_);
        return std::exchange(done_, {});
    }
    // Drops the check for `key` if it has not started: true when it was still waiting.
    bool cancel(const std::string& key) {
        std::lock_guard lk(mu_);
        auto it = std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.key == key; });
        if (it == jobs_.end()) return false;
        jobs_.erase(it);
        return true;
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
    std::size_t queue_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Job> jobs_;
    std::vector<Done> done_;
    bool stop_ = false;
    std::thread thread_;  // last: starts after the members it uses
};

}  // namespace kgpu::exporter
