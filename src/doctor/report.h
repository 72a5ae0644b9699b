// The result of `kgpu doctor`: one record per check, grouped by layer, rendered as text or JSON
// (schema: docs/doctor.md).
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kgpu::doctor {

// The layers of the seeds' manual, in the order a GPU travels to a pod.
enum class Layer { hardware, driver, runtime, device_plugin, kubelet, workload };
std::string_view to_string(Layer layer);

enum class Status { ok, warn, fail, skipped };
std::string_view to_string(Status status);

struct CheckResult {
    std::string id;        // "driver.modules"; ids starting "nvml." read NVML
    Layer layer = Layer::hardware;
    std::string title;     // one line: what was checked
    Status status = Status::ok;
    std::string evidence;  // what was read: files and values, NVML calls and return codes
    std::string fix;       // empty when ok; one or two concrete sentences or commands otherwise
    std::vector<std::string> needs;  // ids this check depends on
};

// Appends one line of evidence.
template <class... Args>
void note(CheckResult& r, fmt::format_string<Args...> f, Args&&... args) {
    if (!r.evidence.empty()) r.evidence += '\n';
    r.evidence += fmt::format(f, std::forward<Args>(args)...);
}

struct Report {
    std::vector<CheckResult> checks;  // in the order they ran
    // A check that used another's result without declaring it ("<check> reads <producer>'s
    // result"): a bug in the registry, never shown; the tests require it to be empty.
    std::vector<std::string> undeclared_uses;

    const CheckResult* find(std::string_view id) const;
    bool any_fail() const;
    // 0 when nothing failed (warnings and skipped checks included), 1 otherwise.
    int exit_code() const { return any_fail() ? 1 : 0; }
};

// The readable report: grouped by layer, evidence indented, the fix after "fix:". ANSI colour only
// when `colour` is set (the CLI sets it for a TTY without NO_COLOR).
void print_text(const Report& report, std::ostream& out, bool colour);

// {"checks": [{id, layer, status, title, evidence, fix, needs}], "summary": {ok, warn, fail, skipped}}.
nlohmann::json to_json(const Report& report);

}  // namespace kgpu::doctor
