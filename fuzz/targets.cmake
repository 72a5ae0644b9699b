# The fuzz targets: one per parser of outside input. Each has a harness fuzz/targets/<name>.cpp and
# a seed corpus fuzz/corpus/<name>/ (plus any input that once crashed it). Included by two builds,
# which each define kgpu_fuzz_target() their way:
#   fuzz/CMakeLists.txt   clang + libFuzzer: compiles SOURCES (paths from the repository root;
#                         src/common is always there) and PROTOS (proto/<name>.proto) itself,
#                         so the fuzz build is small and independent of the main build;
#   tests/fuzz/CMakeLists.txt  the main build: links LIBS (the project's libraries) into
#                         kgpu_fuzz_replay, which runs the corpus in the normal test suites.
# PACKAGES are the third-party targets the SOURCES need in the clang build. To add a target: a harness, a corpus folder with
# seeds, and one entry here.

kgpu_fuzz_target(deviceplugin_config
  SOURCES src/deviceplugin/config.cpp src/deviceplugin/config_file.cpp src/deviceplugin/options.cpp src/deviceplugin/values.cpp src/inventory/mig_strategy.cpp
  PACKAGES yaml-cpp
  LIBS kgpu_deviceplugin_core)

kgpu_fuzz_target(sim_fixture
  SOURCES sim/model.cpp sim/fixture.cpp
  INCLUDES sim
  PACKAGES yaml-cpp
  LIBS kgpu_fuzz_sim_model)

kgpu_fuzz_target(containerd_config
  SOURCES src/runtime/containerd.cpp src/runtime/toml_edit.cpp
  PACKAGES tomlplusplus::tomlplusplus
  LIBS kgpu_runtime)

kgpu_fuzz_target(diff
  SOURCES src/runtime/diff.cpp
  INCLUDES tests
  LIBS kgpu_runtime)

kgpu_fuzz_target(doctor_containerd
  SOURCES src/runtime/containerd_settings.cpp src/runtime/containerd.cpp
  PACKAGES tomlplusplus::tomlplusplus
  LIBS kgpu_runtime)

kgpu_fuzz_target(doctor_kernel_log
  SOURCES src/doctor/host.cpp src/cdi/driver_files.cpp
  PACKAGES tomlplusplus::tomlplusplus
  LIBS kgpu_doctor)

kgpu_fuzz_target(doctor_pending
  SOURCES src/doctor/pending.cpp src/doctor/pending_objects.cpp
  LIBS kgpu_doctor)

kgpu_fuzz_target(cgroup
  SOURCES src/exporter/cgroup.cpp
  LIBS kgpu_attribution)

kgpu_fuzz_target(device_id
  SOURCES src/exporter/device_ids.cpp
  LIBS kgpu_attribution)

kgpu_fuzz_target(podresources
  SOURCES src/exporter/podresources.cpp src/exporter/device_ids.cpp
  PROTOS podresources_v1
  LIBS kgpu_attribution)

kgpu_fuzz_target(cri
  SOURCES src/exporter/cri.cpp tests/support/fake_cri.cpp
  PROTOS cri_runtime_v1
  INCLUDES tests
  LIBS kgpu_attribution kgpu_fake_kubelet)

kgpu_fuzz_target(counters_csv
  SOURCES src/exporter/counters.cpp src/exporter/catalogue.cpp
  LIBS kgpu_exporter)

kgpu_fuzz_target(web_config
  SOURCES src/exporter/web_config.cpp
  PACKAGES yaml-cpp
  LIBS kgpu_exporter)

kgpu_fuzz_target(pci_config
  SOURCES src/inventory/vgpu.cpp
  LIBS kgpu_inventory)

kgpu_fuzz_target(http_head
  SOURCES src/exporter/http_parse.cpp
  LIBS kgpu_exporter)

kgpu_fuzz_target(docker_daemon_json
  SOURCES src/runtime/docker.cpp
  PACKAGES nlohmann_json::nlohmann_json
  LIBS kgpu_runtime)

kgpu_fuzz_target(ld_so_cache
  LIBS kgpu_common)

kgpu_fuzz_target(oci_spec
  SOURCES src/toolkit/oci_edit.cpp src/toolkit/request.cpp
  LIBS kgpu_toolkit)

kgpu_fuzz_target(kube_http
  SOURCES src/kube/http.cpp
  LIBS kgpu_kube)

kgpu_fuzz_target(kube_status
  SOURCES src/exporter/kube_status.cpp
  LIBS kgpu_exporter)

kgpu_fuzz_target(mig_config
  SOURCES src/mig/config.cpp src/mig/plan.cpp
  PACKAGES yaml-cpp
  LIBS kgpu_mig)

kgpu_fuzz_target(paused_gpus
  SOURCES src/deviceplugin/paused.cpp
  LIBS kgpu_deviceplugin_core)
