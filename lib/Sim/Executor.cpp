// The interpreter's control flow, memory, cross-lane operations and checks, and the grid loop.
#include "Executor.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

namespace tessera::sim::detail {

namespace {

Cell loadElem(const uint8_t *p, ElemKind k) {
  uint64_t bits = 0;
  std::memcpy(&bits, p, storageBytes(k)); // little-endian host, as the GPU
  Cell c;
  if (isFloat(k))
    c.f = decodeFloat(bits, k);
  else
    c.i = k == ElemKind::I1 ? -int64_t(bits & 1) : signExtend(int64_t(bits), bitWidth(k));
  return c;
}

void storeElem(uint8_t *p, Cell c, ElemKind k) {
  uint64_t bits = isFloat(k) ? encodeFloat(c.f, k) : uint64_t(k == ElemKind::I1 ? c.i & 1 : c.i);
  std::memcpy(p, &bits, storageBytes(k));
}

std::string triple(const std::array<uint32_t, 3> &v) {
  return "(" + std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]) + ")";
}

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

} // namespace

Executor::Executor(const Program &program, const LaunchConfig &config, const std::array<uint32_t, 3> &block,
                   llvm::ArrayRef<ArgValue> args)
    : P(program), config(config), block(block), T(block[0] * block[1] * block[2]),
      wave(uint32_t(program.info.waveSize)) {
  regs.assign(size_t(P.cellRows) * T, Cell{0});
  for (const auto &[slot, values] : P.constants)
    for (uint32_t e = 0; e < values.size(); ++e)
      std::fill_n(cells(slot) + size_t(e) * T, T, values[e]);
  for (size_t i = 0; i < args.size(); ++i)
    if (int32_t s = P.paramSlot[i]; s >= 0) {
      Cell v;
      if (isFloat(P.slots[s].kind))
        v.f = roundToKind(args[i].kind == ArgValue::Kind::Float ? args[i].real : double(args[i].integer),
                          P.slots[s].kind);
      else
        v.i = signExtend(args[i].integer, bitWidth(P.slots[s].kind));
      std::fill_n(cells(s), T, v);
    }
  async.resize(T);
  live.resize(P.bindings.size());
  for (size_t b = 0; b < P.bindings.size(); ++b) {
    const Binding &binding = P.bindings[b];
    LiveBinding &l = live[b];
    if (binding.space == Binding::Space::Global) {
      const BufferArg &buf = args[binding.param].buffer;
      l.base = static_cast<uint8_t *>(buf.data);
      l.lo = -int64_t(buf.bytesBefore);
      l.hi = int64_t(buf.bytes);
      continue;
    }
    uint64_t bytes = binding.space == Binding::Space::Workgroup ? binding.bytes : config.dynamicLdsBytes;
    l.storage.assign(bytes, 0);
    l.written.assign(bytes, 0);
    l.base = l.storage.data();
    l.hi = int64_t(bytes);
  }
}

uint8_t *Executor::acquireMask() {
  if (maskDepth == maskPool.size())
    maskPool.emplace_back(T);
  return maskPool[maskDepth++].data();
}

std::string Executor::threadName(int64_t thread) const {
  std::string where = "block " + triple(blockId);
  if (thread < 0)
    return where;
  uint32_t t = uint32_t(thread);
  std::array<uint32_t, 3> id{t % block[0], (t / block[0]) % block[1], t / (block[0] * block[1])};
  return "thread " + triple(id) + " of " + where;
}

bool Executor::report(const Inst &I, int64_t thread, const std::string &what) {
  const Site &s = P.sites[I.site];
  message = s.loc + ": error: " + s.op + ": " + what + ", in " + threadName(thread);
  return false;
}

bool Executor::runWorkgroup(const std::array<uint32_t, 3> &id) {
  blockId = id;
  for (LiveBinding &l : live)
    std::fill(l.written.begin(), l.written.end(), kUnwritten);
  for (AsyncCopies &a : async)
    a = AsyncCopies();
  uint8_t *all = acquireMask();
  std::fill_n(all, T, 1);
  bool ok = exec(P.entry, all);
  releaseMask();
  return ok;
}

bool Executor::exec(int32_t region, const uint8_t *mask) {
  for (const Inst &I : P.regions[region].insts) {
    ++instructions;
    threadOps += T;
    bool ok = true;
    switch (I.op) {
    case Op::If: ok = execIf(I, mask); break;
    case Op::For: ok = execFor(I, mask); break;
    case Op::While: ok = execWhile(I, mask); break;
    case Op::Yield: execYield(I, mask, false); break;
    case Op::Condition: execYield(I, mask, true); break;
    case Op::Load:
    case Op::Store: ok = execMemory(I, mask); break;
    case Op::LdMatrix: ok = execLdMatrix(I, mask); break;
    case Op::TransposeLoad: ok = execTransposeLoad(I, mask); break;
    case Op::AtomicAddF: ok = execAtomicAdd(I, mask); break;
    case Op::AsyncCopy: ok = execAsyncCopy(I, mask); break;
    case Op::GatherToLds: ok = execGatherToLds(I, mask); break;
    case Op::AsyncCommit: execAsyncCommit(mask); break;
    case Op::AsyncWait: execAsyncWait(I, mask); break;
    case Op::ExtractDyn:
    case Op::InsertDyn: ok = execDynamicPosition(I, mask); break;
    case Op::ThreadId:
    case Op::BlockId:
    case Op::BlockDim:
    case Op::GridDim:
    case Op::LaneId:
    case Op::SubgroupId:
    case Op::NumSubgroups:
    case Op::SubgroupSize: execGeometry(I); break;
    case Op::Barrier: ok = execBarrier(I, mask); break;
    case Op::WarpSync: ok = execWarpSync(I, mask); break;
    case Op::Shuffle: ok = execShuffle(I, mask); break;
    case Op::Dpp: execDpp(I, mask); break;
    case Op::SwapHalves: ok = execSwapHalves(I, mask); break;
    case Op::Matrix: ok = execMatrix(I, mask); break;
    case Op::Nop: break;
    default: execPure(I); break;
    }
    if (!ok)
      return false;
  }
  return true;
}

// ---- Structured control flow -------------------------------------------------------------------

bool Executor::execIf(const Inst &I, const uint8_t *mask) {
  const Cell *cond = cells(I.in[0]);
  uint8_t *thenMask = acquireMask(), *elseMask = acquireMask();
  bool anyThen = false, anyElse = false;
  for (uint32_t t = 0; t < T; ++t) {
    thenMask[t] = mask[t] && cond[t].i;
    elseMask[t] = mask[t] && !cond[t].i;
    anyThen |= thenMask[t];
    anyElse |= elseMask[t];
  }
  bool ok = (!anyThen || exec(I.region, thenMask)) && (I.region2 < 0 || !anyElse || exec(I.region2, elseMask));
  releaseMask();
  releaseMask();
  return ok;
}

bool Executor::execFor(const Inst &I, const uint8_t *mask) {
  const Cell *lb = cells(I.in[0]), *ub = cells(I.in[1]), *step = cells(I.in[2]);
  Cell *iv = cells(I.aux[0]);
  const unsigned bits = bitWidth(I.kind);
  std::copy_n(lb, T, iv);
  for (size_t i = 3; i < I.in.size(); ++i)
    std::copy_n(cells(I.in[i]), size_t(P.slots[I.in[i]].count) * T, cells(I.aux[i - 2]));
  for (uint32_t t = 0; t < T; ++t)
    if (mask[t] && step[t].i <= 0)
      return report(I, t, "step " + std::to_string(step[t].i) + " is not positive");
  // Threads whose bounds differ leave the loop at different iterations: each iteration runs
  // for the threads still inside it.
  uint8_t *active = acquireMask();
  std::copy_n(mask, T, active);
  bool ok = true;
  for (;;) {
    bool any = false;
    for (uint32_t t = 0; t < T; ++t) {
      active[t] = active[t] && (I.imm ? zeroExtend(iv[t].i, bits) < zeroExtend(ub[t].i, bits) : iv[t].i < ub[t].i);
      any |= active[t];
    }
    if (!any || !(ok = exec(I.region, active)))
      break;
    for (uint32_t t = 0; t < T; ++t)
      if (active[t])
        iv[t].i = signExtend(int64_t(uint64_t(iv[t].i) + uint64_t(step[t].i)), bits);
  }
  releaseMask();
  for (size_t r = 0; r < I.out.size(); ++r)
    std::copy_n(cells(I.aux[r + 1]), size_t(P.slots[I.out[r]].count) * T, cells(I.out[r]));
  return ok;
}

bool Executor::execWhile(const Inst &I, const uint8_t *mask) {
  for (size_t i = 0; i < I.in.size(); ++i)
    std::copy_n(cells(I.in[i]), size_t(P.slots[I.in[i]].count) * T, cells(I.aux[i]));
  uint8_t *active = acquireMask();
  std::copy_n(mask, T, active);
  const Cell *cond = cells(int32_t(I.imm2));
  bool ok = true;
  for (;;) {
    if (!(ok = exec(I.region, active)))
      break;
    bool any = false;
    for (uint32_t t = 0; t < T; ++t) {
      active[t] = active[t] && cond[t].i;
      any |= active[t];
    }
    if (!any || !(ok = exec(I.region2, active)))
      break;
  }
  releaseMask();
  return ok;
}

void Executor::execYield(const Inst &I, const uint8_t *mask, bool condition) {
  const size_t first = condition ? 1 : 0;
  std::vector<const Cell *> sources;
  for (size_t i = first; i < I.in.size(); ++i)
    sources.push_back(cells(I.in[i]));
  // A loop may yield its own arguments in another order (a swap): read all before writing.
  std::vector<Cell> temp;
  if (I.imm) {
    std::vector<size_t> offsets;
    for (size_t k = 0; k < sources.size(); ++k) {
      offsets.push_back(temp.size());
      temp.insert(temp.end(), sources[k], sources[k] + size_t(P.slots[I.in[k + first]].count) * T);
    }
    for (size_t k = 0; k < sources.size(); ++k)
      sources[k] = temp.data() + offsets[k];
  }
  auto copyTo = [&](const std::vector<int32_t> &dest) {
    for (size_t k = 0; k < dest.size() && k < sources.size(); ++k) {
      Cell *dst = cells(dest[k]);
      for (uint32_t e = 0; e < P.slots[dest[k]].count; ++e)
        for (uint32_t t = 0; t < T; ++t)
          if (mask[t])
            dst[size_t(e) * T + t] = sources[k][size_t(e) * T + t];
    }
  };
  copyTo(I.out);
  if (condition)
    copyTo(I.aux);
}

// ---- Memory ------------------------------------------------------------------------------------

uint8_t *Executor::address(const Inst &I, uint32_t t, size_t firstIndex, uint32_t elements, Access access,
                           int32_t mem, int64_t shift) {
  const bool store = access != Access::Load;
  const MemRefDesc &m = P.memrefs[mem < 0 ? I.mem : mem];
  const Binding &binding = P.bindings[m.binding];
  LiveBinding &b = live[m.binding];
  const int64_t elemBytes = storageBytes(m.kind), accessBytes = elemBytes * elements;
  const bool lds = binding.space != Binding::Space::Global;
  __int128 element = m.offset + shift;
  for (size_t d = 0; d < m.strides.size(); ++d)
    element += __int128(cells(I.in[firstIndex + d])[t].i) * m.strides[d];
  __int128 offset = element * elemBytes;
  if (offset < b.lo || offset + accessBytes > b.hi) {
    std::string index;
    for (size_t d = 0; d < m.strides.size(); ++d)
      index += (d ? ", " : "") + std::to_string(cells(I.in[firstIndex + d])[t].i);
    report(I, t,
           std::string("out-of-bounds ") + (store ? "store to " : "load from ") + binding.name + " at index [" + index +
               "]: bytes [" + std::to_string(int64_t(offset)) + ", " + std::to_string(int64_t(offset + accessBytes)) +
               ") of a " + (lds ? "workgroup" : "global") + " buffer of " + std::to_string(b.hi) + " bytes" +
               (b.lo ? " (" + std::to_string(-b.lo) + " more before the pointer)" : ""));
    return nullptr;
  }
  if (!lds)
    return b.base + int64_t(offset);
  auto bytes = [&](int64_t byte) {
    return binding.name + " byte " + std::to_string(int64_t(offset) + byte) + " (access of bytes [" +
           std::to_string(int64_t(offset)) + ", " + std::to_string(int64_t(offset) + accessBytes) + "))";
  };
  for (int64_t byte = 0; byte < accessBytes; ++byte) {
    uint8_t state = b.written[int64_t(offset) + byte];
    if (!store && state == kUnwritten) {
      report(I, t, "read of LDS never written: " + bytes(byte));
      return nullptr;
    }
    if (state == kInFlight) {
      report(I, t,
             std::string(store ? "store to" : "read of") +
                 " LDS an asynchronous copy is still writing (no wait of the copying thread covers it): " +
                 bytes(byte));
      return nullptr;
    }
  }
  if (store)
    std::fill_n(b.written.begin() + int64_t(offset), accessBytes,
                access == Access::AsyncStore ? kInFlight : kWritten);
  return b.base + int64_t(offset);
}

bool Executor::execMemory(const Inst &I, const uint8_t *mask) {
  const ElemKind kind = P.memrefs[I.mem].kind;
  const unsigned elemBytes = storageBytes(kind);
  const bool store = I.op == Op::Store;
  Cell *value = store ? cells(I.in[0]) : cells(I.out[0]);
  for (uint32_t t = 0; t < T; ++t) {
    if (!mask[t])
      continue;
    uint8_t *at = address(I, t, store ? 1 : 0, I.count, store ? Access::Store : Access::Load);
    if (!at)
      return false;
    // A vector access promised an alignment (vector.load/store `alignment`) the compiler may
    // use it for wider instructions, which fault (NVIDIA) or split (AMD) when it does not hold.
    if (I.imm > 1 && reinterpret_cast<uintptr_t>(at) % uint64_t(I.imm))
      return report(I, t, std::string(store ? "vector store to" : "vector load from") + " an address not a multiple of "
                              "its declared alignment of " + std::to_string(I.imm) + " bytes");
    for (uint32_t e = 0; e < I.count; ++e) {
      if (store)
        storeElem(at + e * elemBytes, value[size_t(e) * T + t], kind);
      else
        value[size_t(e) * T + t] = loadElem(at + e * elemBytes, kind);
    }
  }
  return true;
}

bool Executor::execAtomicAdd(const Inst &I, const uint8_t *mask) {
  // Workgroups run on several host threads: a compare-and-swap loop on the f32 bits, each add
  // rounded to f32 as the GPU's. memref.atomic_rmw: one element, its old value returned;
  // tessera.atomic_addf: 2 or 4 contiguous elements, the first aligned to their size.
  const Cell *value = cells(I.in[0]);
  Cell *old = I.out.empty() ? nullptr : cells(I.out[0]);
  for (uint32_t t = 0; t < T; ++t) {
    if (!mask[t])
      continue;
    uint8_t *at = address(I, t, 1, I.count, Access::Store);
    if (!at)
      return false;
    if (I.count > 1 && (at - live[P.memrefs[I.mem].binding].base) % (4 * I.count))
      return report(I, t, "a vector atomic add of " + std::to_string(I.count) +
                              " elements at a byte offset not a multiple of " +
                              std::to_string(4 * I.count));
    for (uint32_t e = 0; e < I.count; ++e) {
      auto *word = reinterpret_cast<uint32_t *>(at + 4 * e);
      uint32_t seen = __atomic_load_n(word, __ATOMIC_RELAXED), next;
      do {
        float before;
        std::memcpy(&before, &seen, 4);
        if (old)
          old[t].f = before;
        float sum = before + float(value[size_t(e) * T + t].f);
        std::memcpy(&next, &sum, 4);
      } while (!__atomic_compare_exchange_n(word, &seen, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    }
  }
  return true;
}

bool Executor::execAsyncCopy(const Inst &I, const uint8_t *mask) {
  // The copy happens now; its LDS bytes stay in flight (unreadable, unwritable) until a wait of
  // this thread retires the group that holds it.
  const uint32_t elements = uint32_t(I.imm), elemBytes = storageBytes(I.kind);
  const size_t firstSrcIndex = size_t(I.imm2), sizeOperand = I.in.size() - 1;
  const MemRefDesc &dst = P.memrefs[I.mem];
  for (uint32_t t = 0; t < T; ++t) {
    if (!mask[t])
      continue;
    int64_t count = I.list[0] ? cells(I.in[sizeOperand])[t].i : int64_t(elements);
    if (count < 0 || count > int64_t(elements))
      return report(I, t,
                    "source element count " + std::to_string(count) + " is outside [0, " + std::to_string(elements) +
                        "]");
    const uint8_t *from = nullptr;
    if (count > 0 && !(from = address(I, t, firstSrcIndex, uint32_t(count), Access::Load, I.srcMem)))
      return false;
    uint8_t *to = address(I, t, 0, elements, Access::AsyncStore);
    if (!to)
      return false;
    std::memcpy(to, from ? from : to, size_t(count) * elemBytes);
    std::memset(to + count * elemBytes, 0, size_t(elements - count) * elemBytes);
    int64_t offset = to - live[dst.binding].base;
    async[t].open.push_back({dst.binding, offset, int64_t(elements) * elemBytes});
  }
  return true;
}

bool Executor::execGatherToLds(const Inst &I, const uint8_t *mask) {
  // CDNA global_load_lds_dwordx4: each active lane loads 16 bytes at its own global address into
  // LDS at the wave's base (M0, taken from its first active lane) + 16 x its lane number. The
  // bytes stay in flight until a load-counter wait of the lane retires the load.
  const uint32_t elements = uint32_t(I.imm), elemBytes = storageBytes(I.kind);
  const size_t firstSrcIndex = size_t(I.imm2);
  const MemRefDesc &dst = P.memrefs[I.mem];
  for (uint32_t first = 0; first < T; first += wave) {
    uint32_t leader = first;
    while (leader < T && leader < first + wave && !mask[leader])
      ++leader;
    if (leader == T || leader == first + wave)
      continue;
    for (uint32_t t = leader; t < T && t < first + wave; ++t) {
      if (!mask[t])
        continue;
      for (size_t d = 0; d < firstSrcIndex; ++d)
        if (cells(I.in[d])[t].i != cells(I.in[d])[leader].i)
          return report(I, t,
                        "gather_to_lds: the LDS index differs across the lanes of wave " +
                            std::to_string(first / wave) + " (the wave's first active lane gives it)");
      const uint8_t *from = address(I, t, firstSrcIndex, elements, Access::Load, I.srcMem);
      if (!from)
        return false;
      uint8_t *to = address(I, leader, 0, elements, Access::AsyncStore, -1, int64_t(t - first) * elements);
      if (!to)
        return false;
      std::memcpy(to, from, size_t(elements) * elemBytes);
      async[t].groups.push_back(
          {LdsRange{dst.binding, to - live[dst.binding].base, int64_t(elements) * elemBytes}});
    }
  }
  return true;
}

void Executor::execAsyncCommit(const uint8_t *mask) {
  for (uint32_t t = 0; t < T; ++t)
    if (mask[t]) {
      async[t].groups.push_back(std::move(async[t].open));
      async[t].open.clear();
    }
}

void Executor::execAsyncWait(const Inst &I, const uint8_t *mask) {
  for (uint32_t t = 0; t < T; ++t) {
    if (!mask[t])
      continue;
    auto &groups = async[t].groups;
    size_t retire = groups.size() > size_t(I.imm) ? groups.size() - size_t(I.imm) : 0;
    for (size_t g = 0; g < retire; ++g)
      for (const LdsRange &r : groups[g])
        std::fill_n(live[r.binding].written.begin() + r.offset, r.bytes, kWritten);
    groups.erase(groups.begin(), groups.begin() + int64_t(retire));
  }
}

Executor::WaveRun Executor::wholeWave(const Inst &I, const uint8_t *mask, uint32_t first, const std::string &who,
                                      const char *unit, const char *needs) {
  uint32_t active = 0;
  for (uint32_t l = 0; l < wave && first + l < T; ++l)
    active += mask[first + l];
  if (active == 0)
    return WaveRun::Skip;
  if (active == wave)
    return WaveRun::Run;
  report(I, first,
         who + (who.empty() ? "" : " ") + "executed by " + std::to_string(active) + " of the " + std::to_string(wave) +
             " lanes of " + unit + " " + std::to_string(first / wave) + " (" + needs + ")");
  return WaveRun::Failed;
}

bool Executor::execLdMatrix(const Inst &I, const uint8_t *mask) {
  // PTX ldmatrix.sync.aligned.m8n8.x{1,2,4}.b16: lanes 8i .. 8i + 7 address the 16-byte rows 0-7
  // of tile i; lane l receives bytes 4 (l % 4) .. 4 (l % 4) + 3 of row l / 4 of every tile: two
  // 16-bit elements (with .trans, those of the transposed positions) or four 8-bit ones.
  const ElemKind kind = P.memrefs[I.mem].kind;
  const int tiles = int(I.imm);
  const bool transpose = I.imm2;
  const int perRow = 16 / int(storageBytes(kind)), perLane = perRow / 4;
  Cell *out = cells(I.out[0]);
  Cell rows[4][8][16];
  for (uint32_t first = 0; first < T; first += wave) {
    WaveRun run = wholeWave(I, mask, first, "", "warp", "ldmatrix needs the whole warp");
    if (run == WaveRun::Failed)
      return false;
    if (run == WaveRun::Skip)
      continue;
    for (int tile = 0; tile < tiles; ++tile)
      for (int r = 0; r < 8; ++r) {
        uint8_t *at = address(I, first + 8 * tile + r, 0, uint32_t(perRow), Access::Load);
        if (!at)
          return false;
        for (int c = 0; c < perRow; ++c)
          rows[tile][r][c] = loadElem(at + c * storageBytes(kind), kind);
      }
    for (uint32_t l = 0; l < wave; ++l)
      for (int tile = 0; tile < tiles; ++tile)
        for (int j = 0; j < perLane; ++j) {
          int r = int(l / 4), c = perLane * int(l % 4) + j;
          out[size_t(perLane * tile + j) * T + first + l] = transpose ? rows[tile][c][r] : rows[tile][r][c];
        }
  }
  return true;
}

bool Executor::execTransposeLoad(const Inst &I, const uint8_t *mask) {
  // CDNA4 ds_read_b64_tr_b16: every lane reads the 8 bytes (4 elements) at its address, 8-byte
  // aligned; in each group of 16 lanes, lane l receives element l % 4 of the reads of lanes
  // 16 (l / 16) + (l / 4) % 4 + 4n as its element n. EXEC must be all ones.
  const ElemKind kind = P.memrefs[I.mem].kind;
  const unsigned elemBytes = storageBytes(kind);
  Cell *out = cells(I.out[0]);
  Cell raw[64][4];
  for (uint32_t first = 0; first < T; first += wave) {
    WaveRun run = wholeWave(I, mask, first, "", "wave", "ds_read_b64_tr_b16 needs every lane");
    if (run == WaveRun::Failed)
      return false;
    if (run == WaveRun::Skip)
      continue;
    for (uint32_t l = 0; l < wave; ++l) {
      uint8_t *at = address(I, first + l, 0, 4, Access::Load);
      if (!at)
        return false;
      if (reinterpret_cast<uintptr_t>(at) % 8)
        return report(I, first + l, "ds_read_b64_tr_b16 from an address not a multiple of 8 bytes");
      for (int j = 0; j < 4; ++j)
        raw[l][j] = loadElem(at + j * elemBytes, kind);
    }
    for (uint32_t l = 0; l < wave; ++l)
      for (uint32_t n = 0; n < 4; ++n)
        out[size_t(n) * T + first + l] = raw[(l & ~15u) + (l / 4) % 4 + 4 * n][l % 4];
  }
  return true;
}

bool Executor::execDynamicPosition(const Inst &I, const uint8_t *mask) {
  const bool insert = I.op == Op::InsertDyn;
  const int32_t vector = insert ? I.in[1] : I.in[0];
  const size_t firstDynamic = insert ? 2 : 1;
  Cell *out = cells(I.out[0]);
  if (insert)
    std::copy_n(cells(vector), size_t(P.slots[vector].count) * T, out);
  const Cell *src = cells(insert ? I.in[0] : vector);
  for (uint32_t t = 0; t < T; ++t) {
    int64_t offset = 0;
    size_t dynamic = firstDynamic;
    bool inRange = true;
    for (size_t p = 0; p + 2 < I.list.size(); p += 3) {
      int64_t index = I.list[p] >= 0 ? I.list[p] : cells(I.in[dynamic++])[t].i;
      inRange &= index >= 0 && index < I.list[p + 1];
      offset += index * I.list[p + 2];
    }
    if (!inRange) {
      if (mask[t])
        return report(I, t, "dynamic position out of range of the vector");
      continue; // a thread of an untaken branch: its result is never read
    }
    for (uint32_t e = 0; e < I.count; ++e) {
      if (insert)
        out[size_t(offset + e) * T + t] = src[size_t(e) * T + t];
      else
        out[size_t(e) * T + t] = src[size_t(offset + e) * T + t];
    }
  }
  return true;
}

// ---- Thread geometry and synchronisation -------------------------------------------------------

void Executor::execGeometry(const Inst &I) {
  Cell *d = cells(I.out[0]);
  const unsigned bits = bitWidth(I.kind);
  const int dim = int(I.imm);
  for (uint32_t t = 0; t < T; ++t) {
    uint32_t tid[3] = {t % block[0], (t / block[0]) % block[1], t / (block[0] * block[1])};
    int64_t v = 0;
    switch (I.op) {
    case Op::ThreadId: v = tid[dim]; break;
    case Op::BlockId: v = blockId[dim]; break;
    case Op::BlockDim: v = block[dim]; break;
    case Op::GridDim: v = config.grid[dim]; break;
    case Op::LaneId: v = t % wave; break;
    case Op::SubgroupId: v = t / wave; break;
    case Op::NumSubgroups: v = (T + wave - 1) / wave; break;
    default: v = wave; break;
    }
    d[t].i = signExtend(v, bits);
  }
}

bool Executor::execBarrier(const Inst &I, const uint8_t *mask) {
  uint32_t arrived = 0;
  int64_t missing = -1;
  for (uint32_t t = 0; t < T; ++t) {
    arrived += mask[t];
    if (!mask[t] && missing < 0)
      missing = t;
  }
  if (arrived == T)
    return true;
  // Every thread of a workgroup runs to completion (there is no early exit), so a barrier
  // under a partial mask is one that some threads never reach: a hang or UB on hardware.
  return report(I, -1,
                "barrier reached by " + std::to_string(arrived) + " of " + std::to_string(T) +
                    " threads (divergent barrier; " + threadName(missing) + " does not reach it)");
}

bool Executor::execWarpSync(const Inst &I, const uint8_t *mask) {
  // Every lane a thread names in its mask must reach the same bar.warp.sync (and name itself).
  const Cell *lanes = cells(I.in[0]);
  for (uint32_t t = 0; t < T; ++t) {
    if (!mask[t])
      continue;
    uint32_t first = t - t % wave, named = uint32_t(lanes[t].i);
    if (!(named >> (t % wave) & 1))
      return report(I, t, "the lane mask does not include the lane itself");
    for (uint32_t l = 0; l < wave && l < 32; ++l)
      if ((named >> l & 1) && (first + l >= T || !mask[first + l]))
        return report(I, t,
                      "lane " + std::to_string(l) + " of the mask does not reach this bar.warp.sync (divergent warp)");
  }
  return true;
}

bool Executor::execShuffle(const Inst &I, const uint8_t *mask) {
  const Cell *value = cells(I.in[0]), *offset = cells(I.in[1]), *width = cells(I.in[2]);
  Cell *out = cells(I.out[0]), *valid = cells(I.out[1]);
  const ShuffleMode mode = ShuffleMode(I.imm);
  for (uint32_t t = 0; t < T; ++t) {
    if (!mask[t])
      continue;
    int64_t w = width[t].i, off = offset[t].i;
    if (w <= 0 || w > int64_t(wave) || (w & (w - 1)))
      return report(
          I, t, "width " + std::to_string(w) + " is not a power of two up to the wave size " + std::to_string(wave));
    int64_t lane = t % wave, segment = lane & ~(w - 1), src = 0;
    switch (mode) {
    case ShuffleMode::Xor: src = lane ^ off; break;
    case ShuffleMode::Down: src = lane + off; break;
    case ShuffleMode::Up: src = lane - off; break;
    case ShuffleMode::Idx:
      // AMD's lowering reads lane `offset` of the wave, NVIDIA's lane `offset` of the segment:
      // the two agree only for a full-wave width.
      if (w != int64_t(wave))
        return report(I, t,
                      "idx shuffle with width " + std::to_string(w) +
                          " smaller than the wave is lowered differently on AMD and NVIDIA");
      src = off;
      break;
    }
    // Out of the thread's segment of `width` lanes: its own value, valid = false.
    bool ok = src >= segment && src < segment + w;
    uint32_t srcThread = uint32_t(t - lane + (ok ? src : lane));
    if (ok && (srcThread >= T || !mask[srcThread]))
      return report(I, t, "reads lane " + std::to_string(src) + ", which is inactive (undefined on the GPU)");
    for (uint32_t e = 0; e < I.count; ++e)
      out[size_t(e) * T + t] = value[size_t(e) * T + srcThread];
    valid[t].i = ok ? -1 : 0;
  }
  return true;
}

bool Executor::execSwapHalves(const Inst &I, const uint8_t *mask) {
  const Cell *a = cells(I.in[0]), *b = cells(I.in[1]);
  Cell *lo = cells(I.out[0]), *hi = cells(I.out[1]);
  const uint32_t half = wave / 2;
  // Whole half-waves trade places: every lane of the wave takes part.
  for (uint32_t t = 0; t < T; ++t) {
    if (!mask[t])
      continue;
    uint32_t lane = t % wave, first = t - lane;
    for (uint32_t l = 0; l < wave; ++l)
      if (first + l >= T || !mask[first + l])
        return report(I, t, "lane " + std::to_string(l) + " of the wave is inactive (the swap needs all of them)");
    if (lane < half) {
      lo[t] = a[t];
      hi[t] = a[t + half];
    } else {
      lo[t] = b[t - half];
      hi[t] = b[t];
    }
  }
  return true;
}

void Executor::execDpp(const Inst &I, const uint8_t *mask) {
  const Cell *old = cells(I.in[0]), *value = cells(I.in[1]);
  Cell *out = cells(I.out[0]);
  const DppKind kind = DppKind(I.imm);
  const unsigned rowMask = I.imm2 & 0xf, bankMask = (I.imm2 >> 4) & 0xf;
  const bool boundCtrl = (I.imm2 >> 8) & 1;
  const int64_t arg = I.list.empty() ? 0 : I.list[0];
  for (uint32_t t = 0; t < T; ++t) {
    if (!mask[t])
      continue;
    int64_t lane = t % wave, row = lane / 16, inRow = lane % 16, from = -1;
    switch (kind) {
    case DppKind::QuadPerm: from = (lane & ~3) | I.list[lane & 3]; break;
    case DppKind::RowShl: from = inRow + arg < 16 ? lane + arg : -1; break;
    case DppKind::RowShr: from = inRow >= arg ? lane - arg : -1; break;
    case DppKind::RowRor: from = row * 16 + ((inRow - arg) & 15); break;
    case DppKind::WaveShl: from = lane + 1 < int64_t(wave) ? lane + 1 : -1; break;
    case DppKind::WaveShr: from = lane - 1; break;
    case DppKind::WaveRor: from = (lane + wave - 1) % wave; break;
    case DppKind::WaveRol: from = (lane + 1) % wave; break;
    case DppKind::RowMirror: from = row * 16 + 15 - inRow; break;
    case DppKind::RowHalfMirror: from = (lane & ~7) | (7 - (lane & 7)); break;
    case DppKind::RowBcast15: from = row > 0 ? row * 16 - 1 : -1; break;
    case DppKind::RowBcast31: from = row > 1 ? 31 : -1; break;
    }
    // Rows and banks masked off keep `old`; an invalid or inactive source lane gives 0 with
    // bound_ctrl, else leaves `old` (the lane is not written).
    bool enabled = (rowMask >> row & 1) && (bankMask >> (inRow / 4) & 1);
    uint32_t srcThread = uint32_t(t - lane + from);
    bool validSrc = from >= 0 && srcThread < T && mask[srcThread];
    for (uint32_t e = 0; e < I.count; ++e) {
      size_t i = size_t(e) * T;
      if (enabled && validSrc)
        out[i + t] = value[i + srcThread];
      else if (enabled && boundCtrl)
        out[i + t] = Cell{0}; // +0.0 as well
      else
        out[i + t] = old[i + t];
    }
  }
}

bool Executor::execMatrix(const Inst &I, const uint8_t *mask) {
  const MatrixOpDesc &desc = P.matrixOps[I.matrix];
  Cell *d = cells(desc.dSlot);
  for (uint32_t first = 0; first < T; first += wave) {
    WaveRun run = wholeWave(I, mask, first, desc.mnemonic, "wave", "matrix instructions need the whole wave");
    if (run == WaveRun::Failed)
      return false;
    if (run == WaveRun::Skip)
      continue;
    auto value = [&](const ElemRef &r, int lane) {
      const Cell &c = cells(r.slot)[size_t(r.elem) * T + first + lane];
      if (r.half < 0)
        return c.f;
      const unsigned width = bitWidth(r.packed);
      return decodeFloat((zeroExtend(c.i, 32) >> (width * r.half)) & ((1u << width) - 1), r.packed);
    };
    // Named: MatrixFragments holds function_refs, which must not outlive their callables.
    auto a = [&](int lane, int e) { return value(desc.a[e], lane); };
    auto b = [&](int lane, int e) { return value(desc.b[e], lane); };
    auto c = [&](int lane, int e) { return value(desc.c[e], lane); };
    auto write = [&](int lane, int e, double v) { d[size_t(e) * T + first + lane].f = roundToKind(v, desc.dKind); };
    MatrixFragments frags{a, b, c, write};
    if (std::string problem = executeMatrix(*desc.layout, frags); !problem.empty())
      return report(I, first, desc.mnemonic + " in wave " + std::to_string(first / wave) + ": " + problem);
  }
  return true;
}

// ---- The grid ------------------------------------------------------------------------------------

llvm::Expected<RunStats> runProgram(const Program &P, const LaunchConfig &config, llvm::ArrayRef<ArgValue> args) {
  const KernelInfo &info = P.info;
  if (args.size() != info.params.size())
    return fail("kernel " + info.name + " takes " + llvm::Twine(info.params.size()) + " arguments, " +
                llvm::Twine(args.size()) + " given");
  for (size_t i = 0; i < args.size(); ++i) {
    bool buffer = info.params[i].kind == ParamInfo::Kind::Buffer;
    if (buffer != (args[i].kind == ArgValue::Kind::Buffer))
      return fail("argument '" + info.params[i].name + "' of kernel " + info.name + " must be a " +
                  (buffer ? "buffer" : "scalar"));
    if (buffer && !args[i].buffer.data)
      return fail("argument '" + info.params[i].name + "' of kernel " + info.name + " is a null pointer");
  }
  std::array<uint32_t, 3> block = config.block;
  bool known = info.knownBlock[0] != 0;
  if (block[0] == 0) {
    if (!known)
      return fail("kernel " + info.name + " has no known_block_size: give the block size");
    block = info.knownBlock;
  } else if (known && block != info.knownBlock) {
    return fail("block " + triple(block) + " differs from kernel " + info.name + "'s known_block_size " +
                triple(info.knownBlock));
  }
  uint64_t threads = uint64_t(block[0]) * block[1] * block[2];
  if (threads == 0 || threads > 1024)
    return fail("block " + triple(block) + " has " + llvm::Twine(threads) + " threads (1 to 1024 allowed)");
  for (const Binding &b : P.bindings)
    if (b.space == Binding::Space::DynamicWorkgroup && config.dynamicLdsBytes == 0)
      return fail("kernel " + info.name + " uses dynamic shared memory but the launch gives 0 bytes");

  RunStats stats;
  stats.workgroups = uint64_t(config.grid[0]) * config.grid[1] * config.grid[2];
  auto start = std::chrono::steady_clock::now();
  auto blockOf = [&](uint64_t index) {
    return std::array<uint32_t, 3>{uint32_t(index % config.grid[0]), uint32_t(index / config.grid[0] % config.grid[1]),
                                   uint32_t(index / (uint64_t(config.grid[0]) * config.grid[1]))};
  };
  unsigned workers = unsigned(std::max<uint64_t>(1, std::min<uint64_t>(config.threads, stats.workgroups)));
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex lock;
  std::string error;
  uint64_t failedAt = UINT64_MAX;
  auto work = [&]() {
    Executor ex(P, config, block, args);
    for (uint64_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < stats.workgroups;) {
      if (ex.runWorkgroup(blockOf(i)))
        continue;
      std::lock_guard<std::mutex> guard(lock);
      if (i < failedAt) { // the lowest failing workgroup, as a serial run reports
        failedAt = i;
        error = ex.error();
      }
      failed = true;
    }
    std::lock_guard<std::mutex> guard(lock);
    stats.instructions += ex.instructions;
    stats.threadOps += ex.threadOps;
  };
  if (workers == 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (unsigned w = 0; w < workers; ++w)
      pool.emplace_back(work);
    for (std::thread &t : pool)
      t.join();
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (failed)
    return fail(error);
  return stats;
}

} // namespace tessera::sim::detail
