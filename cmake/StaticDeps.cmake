# Link the kgpu binary against nothing but glibc (issue #17, item 7: `kgpu runtime install` copies
# it onto the host, outside the image, where libyaml-cpp, libfmt, libtomlplusplus, libstdc++ or
# zlib may be missing or of another version). gRPC & co. are static already (KGPU_STATIC_GRPC).
# What this does, per dependency Debian ships:
#  - fmt: compiled from its own headers into one static library (src/common/fmt_static.cpp);
#    Debian has no libfmt.a, and FMT_HEADER_ONLY everywhere costs ~2 s of compile per file.
#  - yaml-cpp: Debian's libyaml-cpp.a. It is built position-independent for executables only,
#    so shared libraries (the simulator) keep linking the shared one: KGPU_YAML_CPP_SHARED.
#  - toml++: compiled once into a static library (src/common/toml_static.cpp) from its headers.
#  - zlib: libz.a.
#  - libstdc++ and libgcc: -static-libstdc++ -static-libgcc on the kgpu executable
#    (src/CMakeLists.txt).
# Off in sanitizer builds (the sanitizer runtimes expect the shared C++ runtime).
option(KGPU_STATIC_DEPS "Link yaml-cpp, fmt, toml++, zlib and libstdc++ into kgpu statically" ON)
if(KGPU_SANITIZE)
  set(KGPU_STATIC_DEPS OFF)
endif()

find_package(yaml-cpp REQUIRED)
get_target_property(KGPU_YAML_CPP_SHARED yaml-cpp LOCATION)

if(NOT KGPU_STATIC_DEPS)
  find_package(fmt REQUIRED)
  return()
endif()

add_library(kgpu_fmt STATIC ${PROJECT_SOURCE_DIR}/src/common/fmt_static.cpp)
set_target_properties(kgpu_fmt PROPERTIES POSITION_INDEPENDENT_CODE ON)
add_library(fmt::fmt ALIAS kgpu_fmt)
add_library(kgpu_fmt_header_only INTERFACE)
target_compile_definitions(kgpu_fmt_header_only INTERFACE FMT_HEADER_ONLY=1)
add_library(fmt::fmt-header-only ALIAS kgpu_fmt_header_only)

find_library(KGPU_YAML_CPP_STATIC NAMES libyaml-cpp.a)
if(NOT KGPU_YAML_CPP_STATIC)
  message(FATAL_ERROR "KGPU_STATIC_DEPS: no libyaml-cpp.a (libyaml-cpp-dev ships it), or configure with -DKGPU_STATIC_DEPS=OFF")
endif()
# Points an imported library target at another file, for every configuration it was imported with.
function(kgpu_relocate_imported target file)
  set_target_properties(${target} PROPERTIES IMPORTED_LOCATION ${file})
  get_target_property(configs ${target} IMPORTED_CONFIGURATIONS)
  if(configs)
    foreach(cfg IN LISTS configs)
      set_target_properties(${target} PROPERTIES IMPORTED_LOCATION_${cfg} ${file})
    endforeach()
  endif()
endfunction()
kgpu_relocate_imported(yaml-cpp ${KGPU_YAML_CPP_STATIC})

add_library(kgpu_toml STATIC ${PROJECT_SOURCE_DIR}/src/common/toml_static.cpp)
target_compile_definitions(kgpu_toml PUBLIC TOML_HEADER_ONLY=0)
set_target_properties(kgpu_toml PROPERTIES POSITION_INDEPENDENT_CODE ON)
add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED GLOBAL)
target_link_libraries(tomlplusplus::tomlplusplus INTERFACE kgpu_toml)

find_package(ZLIB REQUIRED)
find_library(KGPU_ZLIB_STATIC NAMES libz.a)
if(NOT KGPU_ZLIB_STATIC)
  message(FATAL_ERROR "KGPU_STATIC_DEPS: no libz.a (zlib1g-dev ships it), or configure with -DKGPU_STATIC_DEPS=OFF")
endif()
kgpu_relocate_imported(ZLIB::ZLIB ${KGPU_ZLIB_STATIC})
