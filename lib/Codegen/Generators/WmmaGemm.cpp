// The wmma_gemm generator: C = op(A) * op(B), f32 accumulation, any M, N, K.
//
// Recipe: each workgroup owns a tile.m x tile.n block of C, split over its waves; per step of
// tile.k it stages A (as [M][K]) and B (as [N][K]) in LDS with 16-byte loads, then every wave
// runs its atoms over the staged K slice; the epilogue stores the accumulators with tail masks.
#include "tessera/Codegen/Generators.h"
#include "tessera/Codegen/KernelBuilder.h"
#include "tessera/Codegen/LdsLayout.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace tessera {
namespace {

/// The resolved configuration of one GEMM kernel.
struct GemmPlan {
  const MMAAtom *atom;
  int tileM, tileN, tileK, waves;
  int wavesM, wavesN;   ///< wave grid over the workgroup tile
  int fragsM, fragsN;   ///< atoms per wave along M and N
  Type inType, outType;
  bool transA, transB;
  int stages = 1; ///< 2: the next K step's tiles are loaded into registers during compute
};

FailureOr<GemmPlan> planGemm(tessera::WmmaGemmOp op, const TargetInfo &target) {
  GemmPlan p;
  p.inType = op.getDtype();
  p.outType = op.getOutType();
  p.transA = op.getTransposeA();
  p.transB = op.getTransposeB();
  p.atom = target.preferredAtom(*toElemType(p.inType));
  if (!p.atom)
    return op.emitOpError() << "target " << target.chip << " has no matrix instruction for "
                            << p.inType << " inputs";
  if (auto tile = op.getTileAttr()) {
    p.tileM = tile.getM(), p.tileN = tile.getN(), p.tileK = tile.getK();
    p.waves = tile.getWaves();
    if (tile.getStages() > 2)
      return op.emitOpError() << "wmma_gemm supports tile 'stages' 1 or 2, got "
                              << tile.getStages();
    p.stages = tile.getStages();
  } else {
    // 256 threads computing a 128 x 128 block: four 64 x 64 wave tiles on wave64 targets.
    p.tileM = 128, p.tileN = 128, p.tileK = 32, p.waves = 256 / target.waveSize;
    p.stages = target.gemmStages;
  }
  p.wavesM = p.waves >= 2 ? 2 : 1;
  p.wavesN = p.waves / p.wavesM;
  int waveTileM = p.tileM / p.wavesM, waveTileN = p.tileN / p.wavesN;
  const MMAAtom &a = *p.atom;
  if (p.tileM % p.wavesM || p.tileN % p.wavesN || waveTileM % a.m || waveTileN % a.n ||
      p.tileK % a.k)
    return op.emitOpError() << "tile " << p.tileM << "x" << p.tileN << "x" << p.tileK
                            << " with " << p.waves << " waves (" << p.wavesM << "x"
                            << p.wavesN << ") does not divide into " << a.name << " atoms ("
                            << a.m << "x" << a.n << "x" << a.k << ") on " << target.chip;
  p.fragsM = waveTileM / a.m;
  p.fragsN = waveTileN / a.n;
  int accRegs = p.fragsM * p.fragsN * a.c.elementsPerLane();
  if (accRegs > target.maxVgprsPerWave / 2)
    return op.emitOpError() << "tile " << p.tileM << "x" << p.tileN << " with " << p.waves
                            << " waves needs " << accRegs
                            << " accumulator registers per lane, more than half of the "
                            << target.maxVgprsPerWave << " " << target.chip << " has";
  ElemType in = *toElemType(p.inType);
  int ldsBytes = ldsTileBytes(target, in, p.tileM, p.tileK) + ldsTileBytes(target, in, p.tileN, p.tileK);
  if (ldsBytes > target.ldsBytes)
    return op.emitOpError() << "tile needs " << ldsBytes << " bytes of LDS, more than the "
                            << target.ldsBytes << " of " << target.chip;
  return p;
}

/// The GEMM kernel's arguments: C (M x N) = A (M x K) * B (K x N), row strides lda, ldb, ldc.
struct GemmArgs {
  ArgHandle a, b, c, m, n, k, lda, ldb, ldc;
};

KernelSignature gemmSignature(tessera::WmmaGemmOp op, const GemmPlan &p, const TargetInfo &target,
                              GemmArgs &args) {
  MLIRContext *ctx = op.getContext();
  auto ptr = [](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  Type index = IndexType::get(ctx);
  KernelSignature sig;
  sig.name = op.getSymName().str();
  sig.directive = "wmma_gemm";
  sig.directiveAttrs = directiveAttributes(op);
  args.a = sig.add("a", ptr(p.inType), ArgRole::Input);
  args.b = sig.add("b", ptr(p.inType), ArgRole::Input);
  args.c = sig.add("c", ptr(p.outType), ArgRole::Output);
  args.m = sig.add("M", index, ArgRole::Size);
  args.n = sig.add("N", index, ArgRole::Size);
  args.k = sig.add("K", index, ArgRole::Size);
  args.lda = sig.add("lda", index, ArgRole::Stride);
  args.ldb = sig.add("ldb", index, ArgRole::Stride);
  args.ldc = sig.add("ldc", index, ArgRole::Stride);
  sig.grid[0] = GridExpr::ceilDiv(sig.expr(args.n), GridExpr::constant(p.tileN));
  sig.grid[1] = GridExpr::ceilDiv(sig.expr(args.m), GridExpr::constant(p.tileM));
  sig.grid[2] = GridExpr::constant(1);
  sig.blockThreads = p.waves * target.waveSize;
  return sig;
}

} // namespace

FailureOr<gpu::GPUFuncOp> generateWmmaGemm(tessera::WmmaGemmOp op, const TargetInfo &target) {
  FailureOr<GemmPlan> plan = planGemm(op, target);
  if (failed(plan)) return failure();
  const GemmPlan &p = *plan;
  const MMAAtom &atom = *p.atom;
  OpBuilder b(op);
  Location loc = op.getLoc();
  GemmArgs args;
  KernelSignature sig = gemmSignature(op, p, target, args);
  gpu::GPUFuncOp func = createKernel(b, loc, target, sig);
  KernelBuilder kb(b, loc, target);
  // Operands are staged with K along the columns ([M][K], [N][K]) so fragment loads run along
  // K, transposing while staging; where transposing matrix loads exist (ldmatrix.trans,
  // ds_read_b64_tr_b16) an operand stored with K along its rows is staged as it is instead.
  const bool aKRows = p.transA && target.transposingLoads(atom);
  const bool bKRows = !p.transB && target.transposingLoads(atom);
  LdsTile ldsA = aKRows ? kb.allocLds(func, p.inType, p.tileK, p.tileM)
                        : kb.allocLds(func, p.inType, p.tileM, p.tileK);
  LdsTile ldsB = bKRows ? kb.allocLds(func, p.inType, p.tileK, p.tileN)
                        : kb.allocLds(func, p.inType, p.tileN, p.tileK);
  b.setInsertionPoint(func.getBody().front().getTerminator());

  auto arg = [&](ArgHandle h) { return argValue(func, h); };
  Value A = arg(args.a), B = arg(args.b), C = arg(args.c), M = arg(args.m), N = arg(args.n);
  Value K = arg(args.k), lda = arg(args.lda), ldb = arg(args.ldb), ldc = arg(args.ldc);
  const int threads = sig.blockThreads;

  Value m0 = kb.mul(kb.blockId(gpu::Dimension::y), p.tileM);
  Value n0 = kb.mul(kb.blockId(gpu::Dimension::x), p.tileN);
  Value remM = kb.sub(M, m0), remN = kb.sub(N, n0);
  Value lane = kb.laneId(), wave = kb.waveId();
  Value waveRow = kb.mul(kb.divui(wave, p.wavesN), p.tileM / p.wavesM);
  Value waveCol = kb.mul(kb.remui(wave, p.wavesN), p.tileN / p.wavesN);
  // 16-byte vector loads need rows that start on 16-byte boundaries.
  const int vec = 128 / p.inType.getIntOrFloatBitWidth();
  auto aligned = [&](Value ld) {
    return kb.cmpEq(kb.remui(ld, vec), kb.idx(0));
  };
  Value alignedA = aligned(lda), alignedB = aligned(ldb);

  // The A and B tiles of the K step starting at k0, as this thread's registers and into LDS.
  // A is staged as [M][K] and B as [N][K] so fragment loads run along K (or as they are, when
  // transposing matrix loads read them).
  size_t aVectors = 0;
  auto loadAB = [&](Value k0) {
    Value remK = kb.sub(K, k0);
    KernelBuilder::GlobalTile srcA =
        p.transA ? KernelBuilder::GlobalTile{A, kb.add(kb.mul(k0, lda), m0), lda, remK, remM, alignedA}
                 : KernelBuilder::GlobalTile{A, kb.add(kb.mul(m0, lda), k0), lda, remM, remK, alignedA};
    KernelBuilder::GlobalTile srcB =
        p.transB ? KernelBuilder::GlobalTile{B, kb.add(kb.mul(n0, ldb), k0), ldb, remN, remK, alignedB}
                 : KernelBuilder::GlobalTile{B, kb.add(kb.mul(k0, ldb), n0), ldb, remK, remN, alignedB};
    SmallVector<Value> regs = p.transA ? kb.loadGlobalTile(srcA, p.tileK, p.tileM, threads)
                                       : kb.loadGlobalTile(srcA, p.tileM, p.tileK, threads);
    aVectors = regs.size();
    regs.append(p.transB ? kb.loadGlobalTile(srcB, p.tileN, p.tileK, threads)
                         : kb.loadGlobalTile(srcB, p.tileK, p.tileN, threads));
    return regs;
  };
  auto storeAB = [&](ArrayRef<Value> regs) {
    ArrayRef<Value> a = regs.take_front(aVectors), bRegs = regs.drop_front(aVectors);
    if (p.transA) kb.storeLdsTile(a, ldsA, p.tileK, p.tileM, /*transpose=*/!aKRows, threads);
    else kb.storeLdsTile(a, ldsA, p.tileM, p.tileK, /*transpose=*/false, threads);
    if (p.transB) kb.storeLdsTile(bRegs, ldsB, p.tileN, p.tileK, /*transpose=*/false, threads);
    else kb.storeLdsTile(bRegs, ldsB, p.tileK, p.tileN, /*transpose=*/!bKRows, threads);
  };

  SmallVector<Value> init(p.fragsM * p.fragsN, kb.zero(kb.accType(atom)));
  const size_t accCount = init.size();
  // Two stages: the next K step's global loads are in flight while this one computes.
  if (p.stages > 1) init.append(loadAB(kb.idx(0)));
  auto loop = scf::ForOp::create(b, loc, kb.idx(0), kb.ceilDiv(K, p.tileK), kb.idx(1), init);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(loop.getBody());
    Value k0 = kb.mul(loop.getInductionVar(), p.tileK);
    kb.barrier(); // the previous step's fragment loads are done before LDS is overwritten
    SmallVector<Value> prefetched;
    if (p.stages > 1) {
      storeAB(SmallVector<Value>(loop.getRegionIterArgs().drop_front(accCount)));
      kb.barrier();
      prefetched = loadAB(kb.add(k0, p.tileK));
    } else {
      storeAB(loadAB(k0));
      kb.barrier();
    }

    SmallVector<Value> acc(loop.getRegionIterArgs().take_front(accCount));
    for (int kk = 0; kk < p.tileK; kk += atom.k) {
      SmallVector<Value> fragA, fragB;
      for (int i = 0; i < p.fragsM; ++i)
        fragA.push_back(kb.loadOperand(ldsA, atom, KernelBuilder::Operand::A, lane,
                                       kb.add(waveRow, i * atom.m), kk, aKRows));
      for (int j = 0; j < p.fragsN; ++j)
        fragB.push_back(kb.loadOperand(ldsB, atom, KernelBuilder::Operand::B, lane,
                                       kb.add(waveCol, j * atom.n), kk, bKRows));
      for (int i = 0; i < p.fragsM; ++i)
        for (int j = 0; j < p.fragsN; ++j)
          acc[i * p.fragsN + j] = kb.mma(atom, fragA[i], fragB[j], acc[i * p.fragsN + j]);
    }
    acc.append(prefetched);
    scf::YieldOp::create(b, loc, acc);
  }

  KernelBuilder::GlobalTile dstC{C, kb.add(kb.mul(m0, ldc), n0), ldc, remM, remN, Value()};
  for (int i = 0; i < p.fragsM; ++i)
    for (int j = 0; j < p.fragsN; ++j)
      kb.storeAccumulator(atom, loop.getResult(i * p.fragsN + j), dstC, lane,
                          kb.add(waveRow, i * atom.m), kb.add(waveCol, j * atom.n));
  return func;
}

} // namespace tessera
