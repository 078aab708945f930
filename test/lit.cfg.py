# lit configuration of the Tessera FileCheck tests.
import os
import subprocess
import sys
import lit.formats

config.name = "Tessera"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py.in"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tessera_tools_dir, "..", "test")
# Our tools first, then LLVM 22's FileCheck/not/llvm-readelf (never the LLVM 14 ones in /usr/bin).
config.environment["PATH"] = os.pathsep.join(
    [config.tessera_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
config.substitutions.append(("%tessera_src", config.tessera_src_root))
# Absolute tool paths, for RUN lines that empty PATH to prove no external tool is used.
for tool in ["tessera-opt", "tessera-compile"]:
    config.substitutions.append(
        ("%" + tool.replace("-", "_"), os.path.join(config.tessera_tools_dir, tool)))
config.substitutions.append(("%python", sys.executable))

# ptxas (for the sm_90a ptxas gate): from $TESSERA_PTXAS, PATH, /usr/local/cuda/bin or the pip
# nvidia-cuda-nvcc wheel. scripts/test.sh sets TESSERA_REQUIRE_PTXAS=1 so CI cannot skip the gate.
_find = subprocess.run([sys.executable, os.path.join(config.tessera_src_root, "scripts", "ptxas_gate.py"),
                        "--find"], capture_output=True, text=True)
if _find.returncode == 0:
    config.available_features.add("ptxas")
    config.environment["TESSERA_PTXAS"] = _find.stdout.strip()
elif os.environ.get("TESSERA_REQUIRE_PTXAS") == "1":
    lit_config.fatal("TESSERA_REQUIRE_PTXAS=1 but " + _find.stdout.strip())
