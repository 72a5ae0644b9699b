// A stand-in driver library: a real ELF shared object whose only purpose is its SONAME
// (tests/cdi builds it as libcuda.so.550.54.15 / libnvidia-ptxjitcompiler.so.550.54.15 with
// SONAME <name>.so.1, the layout of NVIDIA's driver libraries).
extern "C" int kgpu_fake_driver_library() { return 1; }
