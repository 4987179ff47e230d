// Host: a run of chunks cut into contiguous parts, one per thread (the host codec's compress and decompress).
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

namespace zipcomm {
namespace host {
namespace detail {

/// Chunks per thread at the least: a 4096-element chunk codes in about 30 us on one core, a thread starts in
/// about 20 us.
constexpr uint64_t MIN_CHUNKS_PER_THREAD = 8;

/// How many contiguous parts for_each_part splits `count` chunks into on `threads` threads (0: one per hardware
/// thread), and where part p begins.
inline uint64_t part_count(uint64_t count, unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  return std::max<uint64_t>(1, std::min<uint64_t>(threads, count / MIN_CHUNKS_PER_THREAD));
}
inline uint64_t part_begin(uint64_t count, uint64_t parts, uint64_t p) { return count * p / parts; }

/// Runs fn(part, first, last) on each of `parts` contiguous parts of [0, count), part 0 on the calling thread. An
/// exception a part throws (std::bad_alloc) reaches the caller once every part has ended.
template <class Fn>
inline void for_each_part(uint64_t count, uint64_t parts, Fn&& fn) {
  std::vector<std::exception_ptr> thrown(parts);
  auto run = [&](uint64_t p) {
    try {
      fn(p, part_begin(count, parts, p), part_begin(count, parts, p + 1));
    } catch (...) {
      thrown[p] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (uint64_t p = 1; p < parts; ++p) {
    try {
      pool.emplace_back(run, p);
    } catch (const std::system_error&) {
      run(p);  // no thread to be had: the part runs here
    }
  }
  run(0);
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : thrown)
    if (e) std::rethrow_exception(e);
}

}  // namespace detail
}  // namespace host
}  // namespace zipcomm
