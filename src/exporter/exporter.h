// `kgpu exporter`: the collector plus the HTTP endpoints, run until SIGTERM or SIGINT.
//
// Endpoints: GET/HEAD /metrics (the latest snapshot, text format 0.0.4, gzip when accepted),
// /health (200 "OK" while the collector runs and its last pass ended within three intervals,
// else 503 with the reason; a broken GPU shows in the metrics, never here; a failing PodResources
// socket is named on a second line and the status stays 200), / (a landing page).
// Other paths 404; other methods 405 with Allow: GET, HEAD.
#pragma once

#include <chrono>
#include <functional>

#include "common/error.h"
#include "exporter/collector.h"
#include "exporter/http.h"
#include "nvml/device.h"

namespace kgpu::exporter {

struct ExporterOptions {
    HttpOptions http;
    CollectorOptions collector;
    // Once serving, the address bound (e.g. "127.0.0.1:40123" for --address 127.0.0.1:0) and a
    // newline are written here atomically; the file is removed before the server stops. "" for none.
    std::string ready_file;
};

// The HTTP routes over a collector (tests call it without a server).
HttpResponse route(const HttpRequest& request, const Collector& collector,
                   std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

// Blocks SIGTERM/SIGINT (before any thread starts, so only the main thread takes them), opens
// NVML with `open_nvml`, runs one collection pass, starts serving, logs
// "exporter: listening on <address>" (and writes options.ready_file), and returns when a signal
// arrives. Exit code: 0 after a signal; 1 when NVML cannot be opened, the address cannot be
// bound or the ready file cannot be written.
int run_exporter(const ExporterOptions& options, const std::function<Result<nvml::Session>()>& open_nvml);

}  // namespace kgpu::exporter
