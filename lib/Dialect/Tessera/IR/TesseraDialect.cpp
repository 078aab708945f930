// The tessera dialect: registration and the verifiers of its directives and attributes.
#include "tessera/Dialect/Tessera/IR/TesseraOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace tessera;

#include "tessera/Dialect/Tessera/IR/TesseraDialect.cpp.inc"
#include "tessera/Dialect/Tessera/IR/TesseraEnums.cpp.inc"
#include "tessera/Dialect/Tessera/IR/TesseraInterfaces.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "tessera/Dialect/Tessera/IR/TesseraAttrs.cpp.inc"

void TesseraDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "tessera/Dialect/Tessera/IR/TesseraAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "tessera/Dialect/Tessera/IR/TesseraOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// TileConfigAttr
//===----------------------------------------------------------------------===//

LogicalResult TileConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                     int64_t m, int64_t n, int64_t k, int64_t waves,
                                     int64_t stages) {
  for (auto [name, value] : {std::pair<StringRef, int64_t>{"m", m}, {"n", n}, {"k", k}})
    if (value <= 0 || value % 16 != 0)
      return emitError() << "tile '" << name << "' must be a positive multiple of 16, got "
                         << value;
  if (!llvm::is_contained({1, 2, 4, 8}, waves))
    return emitError() << "tile 'waves' must be 1, 2, 4 or 8, got " << waves;
  if (stages < 1 || stages > 4)
    return emitError() << "tile 'stages' must be between 1 and 4, got " << stages;
  return success();
}

//===----------------------------------------------------------------------===//
// ArgRolesAttr, KernelSetAttr
//===----------------------------------------------------------------------===//

// #tessera.arg_roles<[input, output, size]>: the role names of tessera/Support/ArgRole.h.
Attribute ArgRolesAttr::parse(AsmParser &parser, Type) {
  SmallVector<ArgRole> roles;
  auto parseRole = [&]() -> ParseResult {
    SMLoc loc = parser.getCurrentLocation();
    StringRef name;
    if (parser.parseKeyword(&name)) return failure();
    std::optional<ArgRole> role = parseArgRole(name);
    if (!role)
      return parser.emitError(loc) << "unknown argument role '" << name << "' (expected one of "
                                   << argRoleNames() << ")";
    roles.push_back(*role);
    return success();
  };
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseRole) ||
      parser.parseGreater())
    return {};
  return get(parser.getContext(), roles);
}

void ArgRolesAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  llvm::interleaveComma(getRoles(), printer, [&](ArgRole r) { printer << argRoleName(r); });
  printer << "]>";
}

LogicalResult KernelSetAttr::verify(function_ref<InFlightDiagnostic()> emitError, StringRef name,
                                    int64_t position) {
  if (name.empty()) return emitError() << "a kernel set needs a name";
  if (position < 0) return emitError() << "kernel set position must be >= 0, got " << position;
  return success();
}

LogicalResult TesseraDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == TesseraDialect::getKernelSetAttrName() && !isa<KernelSetAttr>(attr.getValue()))
    return op->emitOpError() << "'" << name << "' must be a #tessera.kernel_set attribute";
  if (name != TesseraDialect::getArgRolesAttrName()) return success();
  auto roles = dyn_cast<ArgRolesAttr>(attr.getValue());
  if (!roles) return op->emitOpError() << "'" << name << "' must be a #tessera.arg_roles attribute";
  // Checked on the kernel IR; lowerings keep the attribute on functions of other argument types.
  auto func = dyn_cast<gpu::GPUFuncOp>(op);
  if (!func) return success();
  if (roles.getRoles().size() != func.getNumArguments())
    return op->emitOpError() << "has " << func.getNumArguments() << " arguments but '" << name
                             << "' lists " << roles.getRoles().size() << " roles";
  for (auto [i, role] : llvm::enumerate(roles.getRoles()))
    if ((role == ArgRole::TileCounter || role == ArgRole::Workspace) &&
        !isa<MemRefType>(func.getArgumentTypes()[i]))
      return op->emitOpError() << "argument " << i << " has role '" << argRoleName(role)
                               << "' but is not a memref (the runtime passes a pointer)";
  return success();
}

//===----------------------------------------------------------------------===//
// Shared directive checks
//===----------------------------------------------------------------------===//

static bool isHalfPrecision(Type t) { return t.isF16() || t.isBF16(); }

static LogicalResult verifyDtype(Operation *op, StringRef name, Type t) {
  if (!isHalfPrecision(t))
    return op->emitOpError() << "'" << name << "' must be f16 or bf16, got " << t;
  return success();
}

/// flash_attn and flash_attn_bwd: any multiple of 8 (one 16-byte vector of a row) up to 256, their
/// tiles widened to the matrix atoms' 16 inside the kernels. The Python API zero-pads other head
/// dims.
static LogicalResult verifyHeadDim(Operation *op, int64_t headDim) {
  if (headDim < 8 || headDim > 256 || headDim % 8)
    return op->emitOpError() << "'head_dim' must be a multiple of 8 from 8 to 256, got " << headDim;
  return success();
}

static LogicalResult verifyDecodeHeadDim(Operation *op, int64_t headDim) {
  if (!llvm::is_contained({32, 64, 96, 128, 256}, headDim))
    return op->emitOpError() << "'head_dim' must be one of 32, 64, 96, 128, 256, got "
                             << headDim;
  return success();
}

/// attn_combine: one f32 column sum per head_dim element and wave sits in LDS; 1024 (MLA's 512 and
/// more) keeps that at 16 KiB.
static constexpr int64_t kMaxCombineHeadDim = 1024;

static LogicalResult verifyPackGqa(Operation *op, int64_t packGqa) {
  if (packGqa < 1 || packGqa > 16 || !llvm::isPowerOf2_64(packGqa))
    return op->emitOpError() << "'pack_gqa' must be a power of two between 1 and 16, got "
                             << packGqa;
  return success();
}

//===----------------------------------------------------------------------===//
// Directives
//===----------------------------------------------------------------------===//

LogicalResult WmmaGemmOp::verify() {
  if (failed(verifyDtype(*this, "dtype", getDtype())))
    return failure();
  Type out = getOutType();
  if (!isHalfPrecision(out) && !out.isF32())
    return emitOpError() << "'out_type' must be f16, bf16 or f32, got " << out;
  return success();
}

LogicalResult FlashAttnOp::verify() {
  if (failed(verifyDtype(*this, "dtype", getDtype())) ||
      failed(verifyHeadDim(*this, getHeadDim())) ||
      failed(verifyPackGqa(*this, getPackGqa())))
    return failure();
  if (getVarlen() && getPackGqa() > 1)
    return emitOpError() << "'pack_gqa' = " << getPackGqa()
                         << " is not supported together with 'varlen'";
  // Key lengths come from cu_seqlens_k: a paged cache is a varlen batch.
  if (getPagedKv() && !getVarlen())
    return emitOpError() << "'paged_kv' needs 'varlen' (cu_seqlens_k gives each sequence's "
                            "key count)";
  if (getSeqused() && !getVarlen())
    return emitOpError() << "'seqused' needs 'varlen' (it bounds each packed sequence)";
  return success();
}

LogicalResult FlashAttnBwdOp::verify() {
  if (failed(verifyDtype(*this, "dtype", getDtype())) ||
      failed(verifyHeadDim(*this, getHeadDim())))
    return failure();
  if (getSeqused() && !getVarlen())
    return emitOpError() << "'seqused' needs 'varlen' (it bounds each packed sequence)";
  return success();
}

LogicalResult AttnCombineOp::verify() {
  Type t = getDtype();
  if (!isHalfPrecision(t) && !t.isF32())
    return emitOpError() << "'dtype' (the output's) must be f16, bf16 or f32, got " << t;
  if (getHeadDim() < 1 || getHeadDim() > kMaxCombineHeadDim)
    return emitOpError() << "'head_dim' must be between 1 and " << kMaxCombineHeadDim << ", got "
                         << getHeadDim();
  return success();
}

static bool isFp8E4M3(Type t) { return isa<Float8E4M3FNUZType, Float8E4M3FNType>(t); }

LogicalResult PagedDecodeOp::verify() {
  if (failed(verifyDtype(*this, "dtype", getDtype())) ||
      failed(verifyDecodeHeadDim(*this, getHeadDim())) || failed(verifyPackGqa(*this, getPackGqa())))
    return failure();
  Type kv = getKvElementType();
  if (!isHalfPrecision(kv) && !isFp8E4M3(kv))
    return emitOpError() << "'kv_dtype' must be f16, bf16, f8E4M3FNUZ or f8E4M3FN, got " << kv;
  if (isHalfPrecision(kv) && kv != getDtype())
    return emitOpError() << "'kv_dtype' " << kv << " must equal 'dtype' " << getDtype()
                         << " unless it is fp8";
  if (isFp8E4M3(kv) && !getKvScale())
    return emitOpError() << "fp8 'kv_dtype' " << kv
                         << " requires 'kv_scale' (per_tensor or per_token)";
  if (!isFp8E4M3(kv) && getKvScale())
    return emitOpError() << "'kv_scale' applies only to an fp8 'kv_dtype', got " << kv;
  // Per-token V scales would have to scale V before a product that reads the stored bytes.
  if (getFp8Products() && (!isFp8E4M3(kv) || getKvScale() != KVScale::PerTensor))
    return emitOpError() << "'fp8_products' needs an fp8 'kv_dtype' with per_tensor 'kv_scale'";
  int64_t block = getBlockSize();
  if (block < 1 || block > 1024 || !llvm::isPowerOf2_64(block))
    return emitOpError() << "'block_size' must be a power of two between 1 and 1024, got "
                         << block;
  if (getMask() == MaskKind::CausalTopLeft)
    return emitOpError() << "'mask' causal_top_left is not meaningful for decoding against a "
                            "cache; use causal_bottom_right";
  return success();
}

#define GET_OP_CLASSES
#include "tessera/Dialect/Tessera/IR/TesseraOps.cpp.inc"
