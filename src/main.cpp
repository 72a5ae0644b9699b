// kgpu: parse, dispatch, exit code. Everything else lives in libraries the tests link.
#include "cli/app.h"

int main(int argc, char** argv) { return kgpu::cli::run(argc, argv); }
