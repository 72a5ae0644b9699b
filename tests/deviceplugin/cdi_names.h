// The device plugin's CDI vendor, NVIDIA's plugin's (issue #23: names that cannot collide with a
// node-wide nvidia.com/gpu spec), spelled out here rather than taken from src/ so a wrong constant
// there fails the tests.
#pragma once

#include <string>

namespace kgpu::test {

inline const std::string kDp = "k8s.device-plugin.nvidia.com/";

}  // namespace kgpu::test
