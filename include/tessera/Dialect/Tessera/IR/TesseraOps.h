// C++ declarations of the tessera dialect, its attributes and its directive ops.
#ifndef TESSERA_DIALECT_TESSERA_IR_TESSERAOPS_H
#define TESSERA_DIALECT_TESSERA_IR_TESSERAOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "tessera/Support/ArgRole.h"

#include "tessera/Dialect/Tessera/IR/TesseraDialect.h.inc"
#include "tessera/Dialect/Tessera/IR/TesseraEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "tessera/Dialect/Tessera/IR/TesseraAttrs.h.inc"

#include "tessera/Dialect/Tessera/IR/TesseraInterfaces.h.inc"

#define GET_OP_CLASSES
#include "tessera/Dialect/Tessera/IR/TesseraOps.h.inc"


#endif // TESSERA_DIALECT_TESSERA_IR_TESSERAOPS_H
