// The mig-parted config file the tests of `kgpu mig` and `kgpu mig-manager` apply on the
// simulated A100 node (sim/nodes/a100-mig.yaml).
#pragma once

namespace kgpu::test {

inline constexpr const char* kMigConfigs = R"(version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - device-filter: ["0x233010DE", "0x20B210DE", "0x20B510DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
  all-balanced:
    - device-filter: ["0x233010DE", "0x20B210DE", "0x20B510DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
  two-3g:
    - devices: [2, 3]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  too-much:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2, "1g.10gb": 1}
)";

}  // namespace kgpu::test
