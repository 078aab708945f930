# lit configuration of the Tessera FileCheck tests.
import os
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
