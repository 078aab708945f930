// tessera-opt: mlir-opt with the tessera dialect, its passes and the upstream ones it uses.
#include "tessera/Compile/Compile.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  tessera::registerTesseraDialects(registry);
  tessera::registerTesseraToolPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Tessera optimizer driver\n", registry));
}
