// The fuzzers' property check: unlike assert, it stays on in every build, and libFuzzer records the abort as a
// crash with its reproducer.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)
