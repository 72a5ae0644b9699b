// The exporter's --web-config-file (Prometheus exporter-toolkit format: TLS, basic auth, headers,
// rate limit), as dcgm-exporter takes it. Loaded from a file as the exporter does; it either
// loads or is refused with a message that names the file. Certificate and key files it names
// do not exist here, so TLS sections are refused after parsing: what is fuzzed is the YAML
// schema and value checks (durations, versions, cipher and curve names, bcrypt hashes).
#include "exporter/web_config.h"
#include "fuzz.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(web_config) {
    const auto path = fuzz::write_scratch("web-config.yml", fuzz::text(data, size));
    auto c = exporter::load_web_config(path.string());
    if (!c) {
        KGPU_FUZZ_CHECK(c.error().message.find(path.string()) != std::string::npos, c.error().message);
        return 0;
    }
    KGPU_FUZZ_CHECK(c->path == path.string(), c->path);
    return 0;
}
