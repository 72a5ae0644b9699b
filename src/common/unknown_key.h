// A key a config file has that its schema does not know (yaml_walker.h collects them where the
// reader ignores unknown keys, as NVIDIA's config parser does).
#pragma once

#include <string>

namespace kgpu::yaml {

struct UnknownKey {
    std::string source;    // the file
    int line = 0;          // 1-based, 0 when unknown
    std::string key;       // dotted path: "flags.failOnInitErorr", "sharing.timeSlicing.resources[0].replica"
    std::string expected;  // the keys allowed there, comma separated
};

}  // namespace kgpu::yaml
