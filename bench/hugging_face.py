"""
Hugging Face's transformers, imported so that it runs beside the lab's kernels.py: import_transformers is how
every place here imports it (bench/speed.py's peers and its conditions; through them tests/test_llama.py and the
GPU check's Hugging Face row). Tooling, not the lesson: nothing the lab trains or evaluates with needs transformers.
"""

import importlib
import importlib.metadata
import sys

from configurator import UserError


def import_transformers():
    """The transformers module, or None where it is not installed.

    Why not `import transformers`: transformers 5.25 depends on Hugging Face's `kernels` package (its "hub
    kernels", layers fetched from the Hub to replace its own), and its modeling code imports that package when it
    loads (transformers/integrations/hub_kernels.py, at module level: `if is_kernels_available(): from kernels
    import CUDAProperties, ...`) whenever a distribution named kernels is installed. In the lab's processes the
    name `kernels` is our kernels.py: the repository root is on sys.path, and model.py has imported it by that
    name. So transformers got our module and failed (ImportError: cannot import name 'CUDAProperties' from
    'kernels'). One process holds one module per name; kernels.py keeps its name (the design fixes it), so here
    `kernels` is ours and Hugging Face's package cannot be imported.

    What this does: it imports transformers, and loads its modeling code, while `kernels` is marked absent
    (sys.modules['kernels'] = None: importlib.util.find_spec('kernels') is then None and `import kernels` fails).
    transformers decides, once (is_kernels_available is cached), that the hub-kernels package is not installed,
    and runs as it does without it, as 5.23 did: its own PyTorch layers, the ones bench/speed.py compares ours
    against (hub kernels replace them only when asked, kernelize() or use_kernels=True, which nothing here does,
    and they come from the Hub). Our module is `kernels` again when it returns.

    Not chosen: USE_HUB_KERNELS=NO, which transformers reads only when asked to kernelize, not before that
    import; putting the repository root last on sys.path, since model.py has imported ours as `kernels` by then;
    and importing transformers with Hugging Face's package as `kernels`, ours put back after, which would leave
    transformers with half a package: its later imports (`from kernels import Mode`, when a model is asked to
    kernelize) would find ours.

    Raises UserError, one line, if transformers reaches our kernels.py all the same (a version that imports
    `kernels` another way)."""
    ours = sys.modules.get("kernels")
    sys.modules["kernels"] = None  # absent to transformers while it loads: find_spec None, `import kernels` fails
    try:
        try:
            import transformers
        except ModuleNotFoundError as e:
            if e.name == "transformers":
                return None
            raise
        importlib.import_module("transformers.modeling_utils")  # every model's base, which loads hub_kernels.py
    except ImportError as e:
        if "kernels" not in str(e):
            raise
        version = importlib.metadata.version("transformers")
        raise UserError(f"transformers {version} imports Hugging Face's `kernels` package, and here `kernels` is "
                        f"the lab's kernels.py (bench.hugging_face.import_transformers could not keep them apart: "
                        f"{' '.join(str(e).split())}); uninstall `kernels` (pip uninstall kernels) or install "
                        f"transformers 5.23 to run the Hugging Face rows") from e
    finally:
        if ours is None:
            sys.modules.pop("kernels", None)
        else:
            sys.modules["kernels"] = ours
    transformers.logging.set_verbosity_error()  # its notes on config defaults are not the benchmark's business
    return transformers
