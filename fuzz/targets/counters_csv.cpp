// dcgm-exporter's counters CSV (`kgpu exporter -f FILE`): parsed as dcgm-exporter reads it, then
// turned into the selection the exporter serves. A file either parses or is refused with a
// message naming file:line; every parsed line has a field name and a type; selecting from the
// lines always keeps the kgpu_* metrics on.
#include "exporter/catalogue.h"
#include "exporter/counters.h"
#include "fuzz.h"

using namespace kgpu;

KGPU_FUZZ_TARGET(counters_csv) {
    auto lines = exporter::parse_counters_csv(fuzz::text(data, size), "counters.csv");
    if (!lines) {
        KGPU_FUZZ_CHECK(lines.error().message.starts_with("counters.csv:"), lines.error().message);
        return 0;
    }
    for (const auto& l : *lines) KGPU_FUZZ_CHECK(!l.field.empty(), "a line without a field name");
    const auto sel = exporter::select_counters(*lines);
    for (const auto& m : exporter::catalogue())
        if (m.name.starts_with("kgpu_")) KGPU_FUZZ_CHECK(sel.enabled(m.id), std::string(m.name));
    return 0;
}
