// Catch2 runner for the zipcomm host tests. Prints the random seed of this run first; rerun a failure with
// ZIPCOMM_TEST_SEED=<seed> (every test case also CAPTUREs it, so it appears in each failure message).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "test_util.hpp"

int main(int argc, char* argv[]) {
  bool listing = false;  // catch_discover_tests parses --list-* output: keep it clean
  for (int i = 1; i < argc; ++i) listing |= std::strncmp(argv[i], "--list", 6) == 0;
  if (!listing)
    std::printf("zipcomm host tests: seed %llu (reproduce with ZIPCOMM_TEST_SEED=%llu)\n",
              static_cast<unsigned long long>(zt::base_seed()), static_cast<unsigned long long>(zt::base_seed()));
  std::fflush(stdout);
  return Catch::Session().run(argc, argv);
}
