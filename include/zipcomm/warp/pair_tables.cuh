// Warp level: the pair code's tables in shared memory. The code is static, so one copy per block serves all of
// its warps; kernels load it once (a copy from device global memory) before they code. The fixed code has none.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../config.hpp"
#include "../thread/fixed_code.hpp"
#include "../thread/pair_code.hpp"

namespace zipcomm {
namespace warp {

/// Encode entries, one per symbol pair and fraction bucket (5 KB; thread::PairCode's layout).
struct PairEncodeTable {
  uint32_t entry[4][thread::PairCode::NUM_PAIRS];
};
/// Decode entries, one per 12-bit window and fraction bucket (64 KB; thread::PairCode's layout).
struct PairDecodeTable {
  uint32_t entry[4][thread::PairCode::WINDOWS];
};
/// Both, for the steps that decode and encode (decode + reduce + encode).
struct PairTables {
  PairDecodeTable decode;
  PairEncodeTable encode;
};

namespace detail {
// 16-byte copy by the group's threads, then group.sync(): the table is read-only from then on.
template <class Group>
ZIPCOMM_DEVICE void copy_table(void* dst, const void* src, uint32_t bytes, Group& group) {
  static_assert(sizeof(uint4) == 16, "");
  const uint4* s = static_cast<const uint4*>(src);
  uint4* d = static_cast<uint4*>(dst);
  for (uint32_t i = uint32_t(group.thread_rank()); i < bytes / 16; i += uint32_t(group.size())) d[i] = __ldg(s + i);
  group.sync();
}
}  // namespace detail

/// Fills `table` (shared memory) with the group's threads; returns after group.sync().
template <class Group>
ZIPCOMM_DEVICE void LoadPairTable(PairEncodeTable& table, Group& group) {
  static_assert(sizeof(PairEncodeTable) == sizeof(thread::DEVICE_PAIR_TABLES.encode), "layout");
  detail::copy_table(&table, &thread::DEVICE_PAIR_TABLES.encode, sizeof(PairEncodeTable), group);
}
template <class Group>
ZIPCOMM_DEVICE void LoadPairTable(PairDecodeTable& table, Group& group) {
  static_assert(sizeof(PairDecodeTable) == sizeof(thread::DEVICE_PAIR_TABLES.decode), "layout");
  detail::copy_table(&table, &thread::DEVICE_PAIR_TABLES.decode, sizeof(PairDecodeTable), group);
}
template <class Group>
ZIPCOMM_DEVICE void LoadPairTable(PairTables& tables, Group& group) {
  detail::copy_table(&tables.decode, &thread::DEVICE_PAIR_TABLES.decode, sizeof(PairDecodeTable), group);
  detail::copy_table(&tables.encode, &thread::DEVICE_PAIR_TABLES.encode, sizeof(PairEncodeTable), group);
}

/// The fixed code reads no table; kernels that serve both codes declare this one in its place and load it alike.
struct NoTable {};
/// Both of NoTable, as PairTables holds both of the pair code's.
struct NoTables {
  NoTable decode, encode;
};
/// The shared-memory tables of a code's warp encoder and decoder, and of both (decode + reduce + encode).
template <class Code>
struct TablesOf {
  using Encode = PairEncodeTable;
  using Decode = PairDecodeTable;
  using Both = PairTables;
};
template <>
struct TablesOf<thread::FixedCode> {
  using Encode = NoTable;
  using Decode = NoTable;
  using Both = NoTables;
};

/// Fills whichever table a code reads (LoadPairTable; nothing for NoTable); returns after group.sync().
template <class Table, class Group>
ZIPCOMM_DEVICE void LoadCodeTable(Table& table, Group& group) {
  if constexpr (std::is_same<Table, NoTable>::value || std::is_same<Table, NoTables>::value)
    group.sync();
  else
    LoadPairTable(table, group);
}

/// A warp as a group (sync = __syncwarp), for a warp that loads its own tables.
struct WarpGroup {
  ZIPCOMM_DEVICE uint32_t thread_rank() const { return threadIdx.x & 31u; }
  ZIPCOMM_DEVICE uint32_t size() const { return 32; }
  ZIPCOMM_DEVICE void sync() const { __syncwarp(); }
};

}  // namespace warp
}  // namespace zipcomm
