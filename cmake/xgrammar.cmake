# xgrammar's C++ core (constrained decoding), built from its released source: the PyPI sdist that
# scripts/setup.sh fetches into .deps/. Only the static library; no Python bindings.
set(SERVE8_XGRAMMAR_SOURCE "${PROJECT_SOURCE_DIR}/.deps/xgrammar-0.2.8"
    CACHE PATH "xgrammar 0.2.8's source tree (the PyPI sdist, unpacked)")
if(NOT EXISTS "${SERVE8_XGRAMMAR_SOURCE}/CMakeLists.txt")
  message(FATAL_ERROR "xgrammar's source is not at ${SERVE8_XGRAMMAR_SOURCE}: run scripts/setup.sh "
                      "(it fetches the xgrammar 0.2.8 sdist from PyPI) or set SERVE8_XGRAMMAR_SOURCE")
endif()
# xgrammar reads its build options from config.cmake in the top build directory before its own
# defaults (which switch the Python bindings on).
file(WRITE "${CMAKE_BINARY_DIR}/config.cmake"
     "set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\nset(XGRAMMAR_BUILD_CXX_TESTS OFF)\nset(XGRAMMAR_ENABLE_CPPTRACE OFF)\n")
add_subdirectory("${SERVE8_XGRAMMAR_SOURCE}" "${CMAKE_BINARY_DIR}/xgrammar" EXCLUDE_FROM_ALL SYSTEM)
# Its flags add -flto=auto (GCC-only objects clang's fuzz and sanitizer trees cannot link) and
# -Werror (a newer compiler's warning must not break our build); later flags win. Sanitizer and
# fuzz trees leave it uninstrumented: it is not ours to check, and instrumented it builds for minutes.
target_compile_options(xgrammar PRIVATE -fno-lto -Wno-error -w -fno-sanitize=all)
