// toml++'s compiled part, built once into kgpu (cmake/StaticDeps.cmake): every other translation
// unit includes toml++ with TOML_HEADER_ONLY=0 and links this, instead of Debian's shared library
// (the installed kgpu depends on glibc only) or the header-only mode in each file (~2.5 s of
// compile time each).
#define TOML_IMPLEMENTATION
#include <toml++/toml.h>
