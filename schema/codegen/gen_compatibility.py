#!/usr/bin/env python3
"""Generate docs/compatibility.md: which CUDA, cuBLAS, cuBLASLt, cuDNN and cuFFT functions the Tally
client forwards to tallyd and which return NotSupported.

Usage:
    gen_compatibility.py --client-library build/client/libtally_client.so
                         --cuda-include /usr/local/cuda/include [--cudnn-include DIR]
                         [--nm nm] --out FILE [--check docs/compatibility.md]

With --check, FILE is written and compared with the checked-in copy; a difference fails
(exit status 1) with a diff and the command that regenerates it (the CTest test
codegen.compatibility_doc does this).

Where the answer comes from
---------------------------
The linked client library, not the client sources: libtally_client.so defines every CUDA
runtime and driver export twice over.  gen_cuda_stubs.py emits a *weak* NotSupported stub for
each one, and a hand-written definition in client/ (TALLY_API) is *strong* and wins at link
time.  So in `nm -D --defined-only` an export with binding T (strong) is implemented and one
with W (weak) is a stub.  Reading the sources instead would mean re-doing the preprocessor:
cuda.h renames most entry points (#define cuMemAlloc cuMemAlloc_v2), client files #undef some
of those renames to define legacy exports, and cuBLAS copies are defined through macros.
The symbol table has none of that ambiguity; the price is that the table needs a build
(`cmake --build build --target update_compatibility_doc` builds the library first).

What counts as one function
---------------------------
The headers give the list (the same raw-text reading as gen_cuda_stubs.py): one entry per name
an application writes (cudaMemcpy, cuMemAlloc).  Its status is that of the export a program
built against these headers binds to (cudaMemcpy, cuMemAlloc_v2; for cuGraphInstantiate,
which cuda.h aliases to cuGraphInstantiateWithFlags, the newest cuGraphInstantiate
generation).  The other exports of the same name are reported separately: the per-thread
default stream twins (cudaMemcpy_ptds, cuLaunchKernel_ptsz) and the other ABI generations of
a driver function (the legacy cuMemAlloc that binaries built against pre-3.2 headers call,
the opt-in cuCtxGetDevice_v2).
The profiler's headers (cuda_profiler_api.h, cudaProfiler.h) are read as well although
gen_cuda_stubs.py does not stub them: a profiler function the client does not define is
"not intercepted".

Families are the Doxygen groups of cuda_runtime_api.h and cuda.h (`\\defgroup CUDART_MEMORY
Memory Management`), the ones NVIDIA's API reference is built from; a function belongs to the
group around its first declaration.  cuBLAS functions are grouped by the section banners of
cublas_api.h (Helper, BLAS1/2/3, BLAS-like Extension), cuDNN functions by header
(cudnn_graph.h, cudnn_ops.h, cudnn_cnn.h, cudnn_adv.h), cuBLASLt is one family, cuFFT another.

cuBLAS and cuDNN stubs are weak too, but a generated stub may marshal the call to tallyd, so
for those the strong/weak split is refined with gen_library_stubs.py's own classification:
strong = hand-written, weak and classified = forwarded by the generated stub, weak and not
classified = NotSupported (with the generator's reason), absent = not intercepted (the
application's own library gets the call).  cuBLASLt and cuFFT are hand-written only.  Functions that
return no status (cudaGetErrorString, cudnnGetVersion) are never stubbed: they are listed as
implemented when the library defines them.

Status of a family: implemented (every function), partial (some), not supported (none).

Determinism: the output depends only on the headers and the library's symbol table; lists
are sorted, there are no timestamps or paths, and the file is written with "\\n".
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_cuda_stubs as cuda_stubs  # noqa: E402
import gen_library_stubs as library_stubs  # noqa: E402

GENERATOR = "schema/codegen/gen_compatibility.py"
DOC = "docs/compatibility.md"
REGENERATE = "cmake --build build --target update_compatibility_doc"
CHECK_TEST = "codegen.compatibility_doc"

IMPLEMENTED = "implemented"
PARTIAL = "partial"
NOT_SUPPORTED = "not supported"

# A NotSupported list longer than this is folded into a <details> block.
FOLD_AFTER = 12

PER_THREAD_MACRO = "CUDA_API_PER_THREAD_DEFAULT_STREAM"
UNGROUPED = "Not in a documented group"

CUDNN_FAMILIES = {
    "cudnn_graph.h": "cudnn_graph: handles, tensors, backend (graph) API",
    "cudnn_ops.h": "cudnn_ops: tensor operations, pooling, normalization, dropout",
    "cudnn_cnn.h": "cudnn_cnn: convolutions, fused ops",
    "cudnn_adv.h": "cudnn_adv: RNN, multi-head attention, CTC loss",
}
CUBLASLT_FAMILY = "cuBLASLt API"
CUFFT_FAMILY = "cuFFT API (cufft.h, cufftXt.h)"
CUBLAS_BANNER = re.compile(r"/\*\s*-+\s*CUBLAS\s+(.+?)\s*-+\s*\*/")


class CompatibilityError(Exception):
    pass


# --------------------------------------------------------------------------
# The client library's exports
# --------------------------------------------------------------------------

STRONG = "strong"
WEAK = "weak"


def parse_nm_output(text: str) -> dict[str, str]:
    """name -> STRONG / WEAK from `nm -D --defined-only` lines ("addr T name@@VERSION")."""
    exports = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        kind, name = parts[1], parts[2].split("@", 1)[0]
        exports[name] = WEAK if kind in "WwVv" else STRONG
    return exports


def read_exports(library: str, nm: str) -> dict[str, str]:
    if not os.path.isfile(library):
        raise CompatibilityError(f"{library} does not exist: build the client library first")
    result = subprocess.run([nm, "-D", "--defined-only", library], capture_output=True, text=True)
    if result.returncode != 0:
        raise CompatibilityError(f"{nm} failed on {library}: {result.stderr.strip()}")
    return parse_nm_output(result.stdout)


# --------------------------------------------------------------------------
# Families from the headers' layout
# --------------------------------------------------------------------------

DEFGROUP = re.compile(r"\\defgroup\s+(\w+)\s+(.*?)\s*(?:\*/)?\s*$")
ADDTOGROUP = re.compile(r"\\addtogroup\s+(\w+)")
CUDA_DECL = re.compile(r"\b(?:cudaError_t|CUresult)\s+(?:CUDARTAPI|CUDAAPI)\s+([A-Za-z_]\w*)\s*\(")
ANY_CUDA_DECL = re.compile(r"\b(?:CUDARTAPI|CUDAAPI)\s+([A-Za-z_]\w*)\s*\(")


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return f.read().replace("\r\n", "\n")


def doxygen_group_of_each_line(raw: str) -> list[str | None]:
    """Title of the innermost open Doxygen group (`@{` ... `@}`) at each line."""
    titles: dict[str, str] = {}
    pending = None
    open_groups: list[str | None] = []
    per_line = []
    for line in raw.split("\n"):
        defined = DEFGROUP.search(line)
        if defined:
            titles[defined.group(1)] = defined.group(2)
            pending = defined.group(1)
        added = ADDTOGROUP.search(line)
        if added:
            pending = added.group(1)
        if "@{" in line:
            open_groups.append(pending)
        if "@}" in line and open_groups:
            open_groups.pop()
        current = open_groups[-1] if open_groups else None
        per_line.append(titles.get(current, current) if current else None)
    return per_line


def declarations_by_line(code: str, pattern: re.Pattern) -> list[tuple[str, int]]:
    """(name, 0-based line) of each match; `code` must keep the raw text's line breaks."""
    return [(m.group(1), code.count("\n", 0, m.start())) for m in pattern.finditer(code)]


def first_family(declarations: list[tuple[str, int]], family_at: list) -> dict[str, str]:
    """name -> family of its first declaration inside a family."""
    families: dict[str, str] = {}
    for name, line in declarations:
        if family_at[line] is not None:
            families.setdefault(name, family_at[line])
    return families


def family_order(family_at: list) -> list[str]:
    seen: dict[str, None] = {}
    for title in family_at:
        if title is not None:
            seen.setdefault(title)
    return list(seen)


@dataclass
class HeaderLayout:
    family_of: dict[str, str]   # function name -> family title
    order: list[str]            # family titles in header order
    non_status: list[str]       # declared functions that return no status (not stubbed)
    resolve: Callable[[str], str]             # name -> export, default build
    resolve_per_thread: Callable[[str], str]  # name -> export, CUDA_API_PER_THREAD_DEFAULT_STREAM


def preprocessed(path: str, defines=()) -> cuda_stubs.MiniPP:
    """The macro state at the end of `path`, for resolving names as a program would."""
    pp = cuda_stubs.MiniPP(defines)
    pp.run(path)
    return pp


def cuda_header_layout(path: str) -> HeaderLayout:
    raw = read_text(path)
    code = cuda_stubs.strip_comments(raw)  # keeps line breaks
    family_at = doxygen_group_of_each_line(raw)
    status_decls = declarations_by_line(code, CUDA_DECL)
    status_names = {name for name, _ in status_decls}
    non_status = sorted({name for name, _ in declarations_by_line(code, ANY_CUDA_DECL)} - status_names)
    default_pp = preprocessed(path)
    per_thread_pp = preprocessed(path, (PER_THREAD_MACRO,))
    family_of = first_family(status_decls, family_at)
    # A name the header renames to another function's name gives that function its family:
    # the Graph Management group declares `cuGraphInstantiate`, which cuda.h turns into
    # cuGraphInstantiateWithFlags.
    for name, family in list(family_of.items()):
        family_of.setdefault(default_pp.resolve_ident(name), family)
    return HeaderLayout(family_of, family_order(family_at), non_status,
                        default_pp.resolve_ident, per_thread_pp.resolve_ident)


# --------------------------------------------------------------------------
# CUDA runtime and driver entry points
# --------------------------------------------------------------------------

@dataclass
class EntryPoint:
    name: str                  # as an application writes it: cudaMemcpy, cuMemAlloc
    family: str
    symbol: str                # the export a program built against these headers calls
    per_thread: str | None     # its export under CUDA_API_PER_THREAD_DEFAULT_STREAM
    other_generations: list = field(default_factory=list)  # other ABI generations (+ twins)
    stubbed: bool = True       # gen_cuda_stubs.py gives it a weak stub


# Headers gen_cuda_stubs.py does not read (the profiler's): their functions have no stub, so one
# the client does not define is not intercepted at all.
UNSTUBBED_HEADERS = {"runtime": ("cuda_profiler_api.h",), "driver": ("cudaProfiler.h",)}


def entry_point(name: str, exports: list[str], layout: HeaderLayout, newest_export) -> EntryPoint:
    """`exports`: every export of the function `name` (its generations and per-thread twins)."""
    symbol = layout.resolve(name)
    if symbol not in exports:  # renamed to another function (cuGraphInstantiate)
        symbol = newest_export(name)
    per_thread = layout.resolve_per_thread(name)
    if per_thread not in exports or per_thread == symbol:
        per_thread = None
    others = sorted(s for s in exports if s not in (symbol, per_thread))
    family = layout.family_of.get(name) or layout.family_of.get(symbol) or UNGROUPED
    return EntryPoint(name, family, symbol, per_thread, others)


def runtime_entry_points(model: cuda_stubs.Model, layout: HeaderLayout) -> list[EntryPoint]:
    by_name = {n: [n] for n, d in model.runtime.items() if "default" in d.passes}
    for name, exports in by_name.items():
        twin = layout.resolve_per_thread(name)
        if twin != name and twin in model.runtime:
            exports.append(twin)
    check_every_export_placed(model.runtime, by_name, "runtime")
    return [entry_point(n, by_name[n], layout, lambda name: name) for n in sorted(by_name)]


def driver_entry_points(model: cuda_stubs.Model, layout: HeaderLayout) -> list[EntryPoint]:
    # cudaTypedefs.h names the function each export is a generation of (PFN_<name>_v<N>).
    name_of = {p.symbol: p.base for p in model.pfns}
    by_name: dict[str, list] = {}
    for symbol in model.driver:
        by_name.setdefault(name_of.get(symbol, symbol), []).append(symbol)
    check_every_export_placed(model.driver, by_name, "driver")

    def newest_export(name: str) -> str:
        plain = sorted((p for p in model.pfns if p.base == name and p.pt is None), key=lambda p: p.version)
        return plain[-1].symbol

    return [entry_point(n, by_name[n], layout, newest_export) for n in sorted(by_name)]


def unstubbed_entry_points(inc: str, api: str) -> tuple[list[EntryPoint], list[str]]:
    """Entry points and family order of UNSTUBBED_HEADERS[api]."""
    entries, order = [], []
    for header in UNSTUBBED_HEADERS[api]:
        layout = cuda_header_layout(os.path.join(inc, header))
        order += layout.order
        entries += [EntryPoint(name, family, layout.resolve(name), None, [], stubbed=False)
                    for name, family in sorted(layout.family_of.items())]
    return entries, order


def check_every_export_placed(exports: dict, by_name: dict, api: str) -> None:
    placed = [s for symbols in by_name.values() for s in symbols]
    if sorted(placed) != sorted(exports):
        missing = sorted(set(exports) - set(placed))
        raise CompatibilityError(f"{api}: exports without an entry point: {missing}")


def entry_implemented(entry: EntryPoint, exports: dict[str, str]) -> bool:
    if not entry.stubbed:
        return exports.get(entry.symbol) == STRONG
    return is_implemented(entry.symbol, exports)


def is_implemented(symbol: str, exports: dict[str, str]) -> bool:
    binding = exports.get(symbol)
    if binding is None:
        raise CompatibilityError(f"{symbol} is neither defined nor stubbed by the client library "
                                 "(is the library older than the headers?)")
    base = symbol[:-len("_ptds")] if symbol.endswith(("_ptds", "_ptsz")) else None
    if binding == WEAK and base in exports:
        # gen_cuda_stubs.py's twin stub calls its base with a null stream meaning the per-thread
        # one (it refuses headers where a twin's parameters differ from its base's).
        return exports[base] == STRONG
    return binding == STRONG


# --------------------------------------------------------------------------
# cuBLAS, cuBLASLt, cuDNN
# --------------------------------------------------------------------------

FORWARDED = "forwarded"        # a generated stub marshals it to tallyd
HAND_WRITTEN = "hand-written"  # a strong definition in client/library
STUB = "NotSupported"
NOT_INTERCEPTED = "not intercepted"  # neither defined nor stubbed: the real library answers


@dataclass
class LibraryFunction:
    name: str
    api: str       # cuBLAS / cuBLASLt / cuDNN
    family: str
    status: str    # FORWARDED / HAND_WRITTEN / STUB / NOT_INTERCEPTED
    reason: str = ""

    @property
    def implemented(self) -> bool:
        return self.status in (FORWARDED, HAND_WRITTEN)


LIBRARY_STATUS_DECL = re.compile(r"\b(?:cublasStatus_t|cudnnStatus_t|cufftResult)\s+(?:CUBLASWINAPI|CUDNNWINAPI|CUFFTAPI)\s+(\w+)\s*\(")
LIBRARY_ANY_DECL = re.compile(r"\b(?:CUBLASWINAPI|CUDNNWINAPI|CUFFTAPI)\s+(\w+)\s*\(")


def library_code(path: str) -> str:
    """Comment-free text with the raw line breaks and the deprecation markers removed."""
    return library_stubs.DEPRECATION.sub(" ", cuda_stubs.strip_comments(read_text(path)))


def cublas_sections(path: str) -> dict[str, str]:
    """Function -> the `/* ---- CUBLAS <section> ---- */` banner above it."""
    raw = read_text(path)
    section_at, section = [], None
    for line in raw.split("\n"):
        banner = CUBLAS_BANNER.search(line)
        if banner:
            section = banner.group(1)
        section_at.append(section)
    return first_family(declarations_by_line(library_code(path), LIBRARY_STATUS_DECL), section_at)


def library_headers(cuda_inc: str, cudnn_inc: str) -> list[tuple[str, str, str]]:
    """(api, generator family, header path) in a fixed order."""
    out = [("cuBLAS", "cublas", os.path.join(cuda_inc, h)) for h in library_stubs.CUBLAS_HEADERS]
    out += [("cuBLASLt", "cublasLt", os.path.join(cuda_inc, h)) for h in library_stubs.CUBLASLT_HEADERS]
    out += [("cuDNN", "cudnn", os.path.join(cudnn_inc, h)) for h in library_stubs.CUDNN_HEADERS]
    out += [("cuFFT", "cufft", os.path.join(cuda_inc, h)) for h in library_stubs.CUFFT_HEADERS]
    return out


def generator_verdict(fn, enums: set) -> tuple[bool, str]:
    """(forwarded, reason): gen_library_stubs.decide's verdict for a non-hand-written function."""
    library_stubs.decide(fn, enums)
    if fn.kinds is not None:
        return True, ""
    hand_only = fn.family in library_stubs.HAND_FORWARDED or fn.name in library_stubs.REFUSED
    return False, fn.reason if hand_only else f"cannot marshal {fn.reason}"


def library_status(fn, exports: dict[str, str], enums: set) -> tuple[str, str]:
    binding = exports.get(fn.name)
    if binding == STRONG:
        return HAND_WRITTEN, ""
    if binding is None:
        why = "in gen_library_stubs.HAND_WRITTEN, so not stubbed, but defined nowhere" \
            if fn.name in library_stubs.HAND_WRITTEN else "neither stubbed nor defined"
        return NOT_INTERCEPTED, why
    forwarded, reason = generator_verdict(fn, enums)
    return (FORWARDED, "") if forwarded else (STUB, reason)


def library_functions(cuda_inc: str, cudnn_inc: str, exports: dict[str, str]) -> list[LibraryFunction]:
    headers = library_headers(cuda_inc, cudnn_inc)
    enums = library_stubs.enum_types([path for _, _, path in headers] +
                                     [os.path.join(cuda_inc, "library_types.h")])
    out: dict[str, LibraryFunction] = {}
    for api, generator_family, path in headers:
        sections = cublas_sections(path) if api == "cuBLAS" else {}
        for fn in library_stubs.parse_header(path, generator_family):
            if fn.name in out:  # the generator keeps the first declaration too
                continue
            if api == "cuBLAS":
                family = sections.get(fn.name, UNGROUPED)
            elif api == "cuBLASLt":
                family = CUBLASLT_FAMILY
            elif api == "cuFFT":
                family = CUFFT_FAMILY
            else:
                family = CUDNN_FAMILIES[os.path.basename(path)]
            status, reason = library_status(fn, exports, enums)
            out[fn.name] = LibraryFunction(fn.name, api, family, status, reason)
    return [out[name] for name in sorted(out)]


def library_non_status(cuda_inc: str, cudnn_inc: str) -> list[str]:
    """Library functions that return no status (versions, names): not stubbed."""
    names = set()
    for _, _, path in library_headers(cuda_inc, cudnn_inc):
        code = library_code(path)
        everything = {m.group(1) for m in LIBRARY_ANY_DECL.finditer(code)}
        names |= everything - {m.group(1) for m in LIBRARY_STATUS_DECL.finditer(code)}
    return sorted(names)


# --------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------

def family_status(implemented: int, total: int) -> str:
    if implemented == total:
        return IMPLEMENTED
    return PARTIAL if implemented else NOT_SUPPORTED


@dataclass
class FamilyRow:
    family: str
    implemented: list
    not_implemented: list  # NotSupported stubs (and any function not intercepted)

    @property
    def status(self) -> str:
        return family_status(len(self.implemented), len(self.implemented) + len(self.not_implemented))


def family_rows(items: list, order: list[str], implemented) -> list[FamilyRow]:
    """One row per family that has items, in `order` (then any others, sorted)."""
    by_family: dict[str, FamilyRow] = {}
    for item in sorted(items, key=lambda i: i.name):
        row = by_family.setdefault(item.family, FamilyRow(item.family, [], []))
        (row.implemented if implemented(item) else row.not_implemented).append(item)
    ranked = order + sorted(f for f in by_family if f not in order)
    return [by_family[f] for f in ranked if f in by_family]


# --------------------------------------------------------------------------
# Model of the whole document
# --------------------------------------------------------------------------

@dataclass
class Compatibility:
    cuda_version: int
    cublas_version: str
    cudnn_version: str
    cufft_version: str
    runtime: list          # EntryPoint
    driver: list           # EntryPoint
    runtime_order: list
    driver_order: list
    libraries: list        # LibraryFunction
    library_order: dict    # api -> family order
    exports: dict          # name -> STRONG / WEAK
    cuda_non_status: list
    library_non_status: list


def header_version(path: str, names: list[str]) -> str:
    text = read_text(path)
    parts = []
    for name in names:
        m = re.search(r"#\s*define\s+%s\s+(\d+)" % name, text)
        if not m:
            raise CompatibilityError(f"{path}: no #define {name}")
        parts.append(m.group(1))
    return ".".join(parts)


def build(cuda_inc: str, cudnn_inc: str, exports: dict[str, str]) -> Compatibility:
    model = cuda_stubs.build_model(cuda_inc)
    runtime_layout = cuda_header_layout(os.path.join(cuda_inc, cuda_stubs.RUNTIME_HEADER))
    driver_layout = cuda_header_layout(os.path.join(cuda_inc, cuda_stubs.DRIVER_HEADER))
    libraries = library_functions(cuda_inc, cudnn_inc, exports)
    runtime_profiler, runtime_profiler_order = unstubbed_entry_points(cuda_inc, "runtime")
    driver_profiler, driver_profiler_order = unstubbed_entry_points(cuda_inc, "driver")
    return Compatibility(
        cuda_version=model.cuda_version,
        cublas_version=header_version(os.path.join(cuda_inc, "cublas_api.h"),
                                      ["CUBLAS_VER_MAJOR", "CUBLAS_VER_MINOR", "CUBLAS_VER_PATCH"]),
        cudnn_version=header_version(os.path.join(cudnn_inc, "cudnn_version.h"),
                                     ["CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"]),
        cufft_version=header_version(os.path.join(cuda_inc, "cufft.h"),
                                     ["CUFFT_VER_MAJOR", "CUFFT_VER_MINOR", "CUFFT_VER_PATCH"]),
        runtime=runtime_entry_points(model, runtime_layout) + runtime_profiler,
        driver=driver_entry_points(model, driver_layout) + driver_profiler,
        runtime_order=runtime_layout.order + runtime_profiler_order,
        driver_order=driver_layout.order + driver_profiler_order,
        libraries=libraries,
        library_order={"cuBLAS": cublas_section_order(cuda_inc), "cuBLASLt": [CUBLASLT_FAMILY],
                       "cuDNN": [CUDNN_FAMILIES[h] for h in library_stubs.CUDNN_HEADERS],
                       "cuFFT": [CUFFT_FAMILY]},
        exports=exports,
        cuda_non_status=runtime_layout.non_status + driver_layout.non_status,
        library_non_status=library_non_status(cuda_inc, cudnn_inc),
    )


def cublas_section_order(cuda_inc: str) -> list[str]:
    raw = read_text(os.path.join(cuda_inc, "cublas_api.h"))
    return list(dict.fromkeys(m.group(1) for m in CUBLAS_BANNER.finditer(raw)))


# --------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------

def code_list(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def folded(lines: list[str], count: int, what: str) -> list[str]:
    """`lines` (Markdown, then a blank line), inside <details> when `count` is large."""
    if count <= FOLD_AFTER:
        return lines + [""]
    return [f"<details><summary>{count} {what}</summary>", ""] + lines + ["", "</details>", ""]


def folded_names(names: list[str], what: str) -> list[str]:
    return folded([code_list(names)], len(names), what)


def table(header: list[str], align: str, rows: list[list]) -> list[str]:
    """`align`: one letter per column, l or r."""
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out + [""]


def family_table(rows: list[FamilyRow]) -> list[str]:
    return table(["Family", "Status", "Implemented", "Not implemented"], "llrr",
                 [[r.family, r.status, len(r.implemented), len(r.not_implemented)] for r in rows])


def not_implemented_lists(rows: list[FamilyRow], describe=lambda item: f"`{item.name}`") -> list[str]:
    """Per family, what is not implemented: names in a line, or one per line with a reason."""
    out = []
    for row in rows:
        if not row.not_implemented:
            continue
        total = len(row.implemented) + len(row.not_implemented)
        out += [f"**{row.family}** ({len(row.not_implemented)} of {total}):", ""]
        items = [describe(item) for item in row.not_implemented]
        with_reasons = any(" — " in i for i in items)
        lines = [f"- {i}" for i in items] if with_reasons else [", ".join(items)]
        out += folded(lines, len(items), "functions")
    return out


def cuda_rows(c: Compatibility, api: str) -> list[FamilyRow]:
    entries, order = (c.runtime, c.runtime_order) if api == "runtime" else (c.driver, c.driver_order)
    return family_rows(entries, order, lambda e: entry_implemented(e, c.exports))


def library_rows(c: Compatibility, api: str) -> list[FamilyRow]:
    return family_rows([f for f in c.libraries if f.api == api], c.library_order[api],
                       lambda f: f.implemented)


def not_intercepted(c: Compatibility) -> list[str]:
    """Functions the client neither defines nor stubs."""
    cuda = [e.name for e in c.runtime + c.driver if not e.stubbed and e.symbol not in c.exports]
    return cuda + [f.name for f in c.libraries if f.status == NOT_INTERCEPTED]


def describe_cuda_entry(entry: EntryPoint, exports: dict[str, str]) -> str:
    if not entry.stubbed and entry.symbol not in exports:
        return f"`{entry.name}` — **not intercepted** (a header gen_cuda_stubs.py does not stub)"
    return f"`{entry.name}`"


def render_intro(c: Compatibility) -> list[str]:
    cuda = f"{c.cuda_version // 1000}.{c.cuda_version % 1000 // 10}"
    states = [
        "- **implemented**: the client defines it, and the call is carried out in tallyd or answered "
        "by the client (hand-written in `client/`; for cuBLAS and cuDNN also a generated stub that "
        "marshals the call). An implemented function may still refuse particular arguments with "
        "NotSupported.",
        "- **NotSupported** (counted as *not implemented*): a generated stub that logs the function's "
        "name once and returns `cudaErrorNotSupported`, `CUDA_ERROR_NOT_SUPPORTED`, "
        "`CUBLAS_STATUS_NOT_SUPPORTED`, `CUDNN_STATUS_NOT_SUPPORTED` or `CUFFT_NOT_SUPPORTED`.",
    ]
    if not_intercepted(c):
        states.append("- **not intercepted** (also counted as *not implemented*; marked where it "
                      "occurs): neither defined nor stubbed by the client, so the call goes past "
                      "Tally, to the application's own copy of the library where there is one.")
    return [
        "# CUDA compatibility",
        "",
        f"<!-- Generated by {GENERATOR} — do not edit. Regenerate: {REGENERATE} -->",
        "",
        f"Generated by `{GENERATOR}` — do not edit. It is made from the headers of CUDA {cuda}, "
        f"cuBLAS {c.cublas_version}, cuDNN {c.cudnn_version} and cuFFT {c.cufft_version} and from the dynamic "
        "symbol table of "
        "the built `libtally_client.so`. After changing what the client defines, regenerate it with "
        f"`{REGENERATE}`; the test `{CHECK_TEST}` fails while this file is out of date.",
        "",
        "What the client does with each function those headers declare:",
        "",
    ] + states + [
        "",
        "How it is decided: a generated stub is a weak symbol, and a hand-written definition is a "
        "strong one that replaces it at link time, so `nm -D` on the library tells them apart; for "
        "cuBLAS and cuDNN the weak stubs are split further by `gen_library_stubs.py`'s classification. "
        "CUDA functions are counted by the name an application writes (`cuMemAlloc`), with the status "
        "of the export a program built against these headers calls (`cuMemAlloc_v2`); the per-thread "
        "default stream exports and the other ABI generations are listed separately below. Families "
        "are the groups of NVIDIA's API reference (the headers' `\\defgroup`s). A family is "
        "*implemented* when all of its functions are, *partial* when some are, *not supported* when "
        "none is.",
        "",
    ]


def render_summary(c: Compatibility) -> list[str]:
    rows = []
    for label, rows_of_api in (("CUDA runtime (`cuda_runtime_api.h`, `cuda_profiler_api.h`)",
                                cuda_rows(c, "runtime")),
                               ("CUDA driver (`cuda.h`, `cudaProfiler.h`)", cuda_rows(c, "driver")),
                               ("cuBLAS (`cublas_api.h`)", library_rows(c, "cuBLAS")),
                               ("cuBLASLt (`cublasLt.h`)", library_rows(c, "cuBLASLt")),
                               ("cuDNN (`cudnn_*.h`)", library_rows(c, "cuDNN")),
                               ("cuFFT (`cufft.h`, `cufftXt.h`)", library_rows(c, "cuFFT"))):
        implemented = sum(len(r.implemented) for r in rows_of_api)
        missing = sum(len(r.not_implemented) for r in rows_of_api)
        rows.append([label, implemented + missing, implemented, missing])
    return ["## Summary", ""] + table(["API", "Functions", "Implemented", "Not implemented"], "lrrr", rows)


# Hand-written remarks printed after an API's lists of functions that are not implemented.
MANAGED_NOTE = ("**Managed memory** (`cudaMallocManaged`, `cuMemAllocManaged`) is pinned host memory shared "
                "with tallyd over a Unix socket and mapped there at the application's own address, so one "
                "pointer serves the host and kernels; kernels reach it over the bus (zero-copy), coherent "
                "at every point but slower than native managed memory for kernels that reread it. Prefetch "
                "and advice (`cudaMemPrefetchAsync`, `cudaMemAdvise`, `cudaStreamAttachMemAsync`) are "
                "accepted and change nothing. Over TCP/TLS, or when tallyd cannot map that address, the "
                "allocation answers NotSupported and logs why. `__managed__` variables are not supported.")

PEER_NOTE = ("**Peer access** (`cudaDeviceCanAccessPeer`, `cudaDeviceGetP2PAttribute`, "
             "`cudaDeviceEnablePeerAccess`, `cuCtxEnablePeerAccess` …) answers from the P2P attributes tallyd "
             "reads from the driver for the tenant's GPUs. tallyd enables peer access between its own "
             "contexts at startup wherever the hardware allows, so enabling it in the application is "
             "bookkeeping (with the native errors): a kernel may reach a peer's memory even before the "
             "application enabled it, which natively faults. Not yet run on a host with two GPUs.")

EXPORT_TABLE_NOTE = ("**Programs with their own CUDA runtime** (linked statically: nvcc's default without "
                     "`-cudart shared`, CuPy's wheels, JAX's CUDA plugin) reach the driver through "
                     "`cuGetProcAddress` and `cuGetExportTable`'s private tables, whose layouts NVIDIA does not "
                     "document. The client serves the tables the CUDA 13 static runtime needs (runtime interface, "
                     "tool hooks, context-local storage, context checks, and the integrity check the runtime "
                     "recomputes) and three known slots of a table cuFFT asks for; any other table, or an "
                     "unknown slot, answers NotSupported and is logged once. Such programs then run "
                     "as ones built with `-cudart shared` do (docs/architecture.md, \"Programs with their own CUDA "
                     "runtime\"). cuFFT itself runs in tallyd (see the cuFFT section), also for frameworks that "
                     "open it by name. Measured on the H200: CuPy 14 and JAX 0.11 run their arrays, matmuls, "
                     "own kernels and FFTs through tallyd as natively, JAX with its autotuner on.")

STREAM_ATTRIBUTE_NOTE = ("**Stream attributes** (`cudaStreamSetAttribute`, `cuStreamGetAttribute`, …) are kept by the "
                         "client and read back as set, but reach no GPU: an L2 access policy window would reserve "
                         "persisting L2 in the context every tenant shares, and the synchronization policy and memory "
                         "synchronization domains are hints. A stream's priority is the one it was created with; "
                         "changing it through an attribute answers NotSupported.")

LAUNCH_ATTRIBUTE_NOTE = ("**Launch attributes** (`cudaLaunchKernelEx`, `cuLaunchKernelEx`): a priority (clamped to the "
                         "tenant's class), cluster dimensions and scheduling preference, cooperative launch and "
                         "programmatic stream serialization reach the driver; programmatic serialization only when "
                         "the stream's previous work is one of the tenant's kernels, otherwise the kernel runs "
                         "ordered, which `cudaGridDependencySynchronize` allows (docs/scheduler.md, \"Exact "
                         "semantics\"). Memory-sync domains, L2 access windows, the synchronization policy and the "
                         "shared-memory carveout are dropped (the launch runs with the defaults); completion events "
                         "and graph-only attributes answer NotSupported.")

CUDA_NOTES = {
    "runtime": [MANAGED_NOTE, "", PEER_NOTE, "", STREAM_ATTRIBUTE_NOTE, "", LAUNCH_ATTRIBUTE_NOTE, ""],
    "driver": [MANAGED_NOTE, "", PEER_NOTE, "", STREAM_ATTRIBUTE_NOTE, "", LAUNCH_ATTRIBUTE_NOTE, "", EXPORT_TABLE_NOTE, "", "Texture and surface references (`cuTexRef*`, `cuSurfRef*`, `cuModuleGetTexRef`, "
               "`cuModuleGetSurfRef`) stay NotSupported: nvcc 13 cannot produce them any more "
               "(`texture<>`/`surface<>` references were removed in CUDA 12; `texture<float, 2> t;` "
               "fails with \"texture is not a template\"), so only binaries built with older toolkits "
               "use them. Texture and surface *objects* are implemented, over CUDA arrays, mipmapped "
               "arrays, linear and pitch-2D memory.", ""],
}


def render_cuda_api(c: Compatibility, api: str, title: str) -> list[str]:
    rows = cuda_rows(c, api)
    return ([f"## {title}", ""] + family_table(rows) +
            [f"### Not implemented {api} functions", ""]
            + not_implemented_lists(rows, lambda e: describe_cuda_entry(e, c.exports))
            + CUDA_NOTES.get(api, []))


def per_thread_section(c: Compatibility) -> list[str]:
    out = ["## Per-thread default stream", "",
           "Programs compiled with `--default-stream per-thread` (`CUDA_API_PER_THREAD_DEFAULT_STREAM`) "
           "call the `_ptds`/`_ptsz` exports of the functions that use the default stream.", ""]
    rows, gaps = [], []
    for api, entries in (("runtime", c.runtime), ("driver", c.driver)):
        twins = [e for e in entries if e.per_thread]
        implemented = [e for e in twins if is_implemented(e.per_thread, c.exports)]
        rows.append([f"CUDA {api}", len(twins), len(implemented), len(twins) - len(implemented)])
        gaps += [e.per_thread for e in twins
                 if is_implemented(e.symbol, c.exports) and not is_implemented(e.per_thread, c.exports)]
    out += table(["API", "Per-thread exports", "Implemented", "NotSupported"], "lrrr", rows)
    if gaps:
        out += ["NotSupported although the function's default export is implemented:", ""]
        out += folded_names(sorted(gaps), "exports")
    return out


def other_generations_section(c: Compatibility) -> list[str]:
    exports = sorted(s for e in c.driver for s in e.other_generations)
    implemented = [s for s in exports if is_implemented(s, c.exports)]
    gaps = sorted(s for e in c.driver if entry_implemented(e, c.exports)
                  for s in e.other_generations if not is_implemented(s, c.exports))
    out = ["## Other ABI generations of driver functions", "",
           "Besides the export a program built against these headers calls, `cuda.h` declares older "
           "generations of some driver functions (the 32-bit `cuMemAlloc` next to `cuMemAlloc_v2`), "
           "which binaries built against older headers and `cuGetProcAddress` callers asking for an "
           "older version get, opt-in newer ones (`cuCtxGetDevice_v2`), and their per-thread twins: "
           f"{len(implemented)} of {len(exports)} are implemented.", ""]
    if implemented:
        out += ["Implemented:", ""] + folded_names(implemented, "exports")
    if gaps:
        out += ["NotSupported although the function's current export is implemented:", ""]
        out += folded_names(gaps, "exports")
    return out


def describe_library_function(f: LibraryFunction) -> str:
    if f.status == NOT_INTERCEPTED:
        return f"`{f.name}` — **not intercepted** ({f.reason})"
    return f"`{f.name}` — {f.reason}" if f.reason else f"`{f.name}`"


LIBRARY_NOTES = {
    "cuBLASLt": "cuBLASLt has no generated forwarding: what `client/library/cublas_lt.cc` does not "
                "define is a NotSupported stub.",
    "cuFFT": "cuFFT has no generated forwarding: plans and transforms run in tallyd "
             "(`client/library/cufft.cc`); multi-GPU plans, callbacks and the other `cufftXt` functions "
             "are NotSupported stubs.",
}


def render_libraries(c: Compatibility) -> list[str]:
    out = ["## cuBLAS, cuBLASLt, cuDNN, cuFFT", "",
           "Functions are named by their exports (`cublasSgemm_v2`, which `cublas_v2.h` calls "
           "`cublasSgemm`). Implemented counts both kinds: hand-written in `client/library` and "
           "forwarded by a stub that `gen_library_stubs.py` generates. A function that is not "
           "implemented is listed with the generator's reason.", ""]
    for api in ("cuBLAS", "cuBLASLt", "cuDNN", "cuFFT"):
        functions = [f for f in c.libraries if f.api == api]
        hand = sum(f.status == HAND_WRITTEN for f in functions)
        forwarded = sum(f.status == FORWARDED for f in functions)
        summary = f"{hand} hand-written, {forwarded} forwarded by generated stubs."
        if api in LIBRARY_NOTES:
            summary += " " + LIBRARY_NOTES[api]
        rows = library_rows(c, api)
        out += [f"### {api}", "", summary, ""] + family_table(rows)
        out += not_implemented_lists(rows, describe_library_function)
    return out


def not_stubbed_section(c: Compatibility) -> list[str]:
    names = sorted(c.cuda_non_status + c.library_non_status)
    implemented = [n for n in names if c.exports.get(n) == STRONG]
    left = [n for n in names if c.exports.get(n) != STRONG]
    hooks = sorted(n for n, b in c.exports.items() if n.startswith("__cuda") and b == STRONG)
    out = ["## Functions that return no status", "",
           "The generators stub only functions that return a CUDA, cuBLAS, cuDNN or cuFFT status. Of the "
           "others (names, versions, descriptors):", ""]
    if implemented:
        out.append(f"- implemented in the client: {code_list(implemented)}")
    if left:
        out.append(f"- not intercepted, so the application's own library answers: {code_list(left)}")
    if hooks:
        out.append(f"- the registration hooks of nvcc's generated code are implemented: {code_list(hooks)}")
    return out + [""]


def render(c: Compatibility) -> str:
    lines = (render_intro(c) + render_summary(c)
             + render_cuda_api(c, "runtime", "CUDA runtime API")
             + render_cuda_api(c, "driver", "CUDA driver API")
             + per_thread_section(c) + other_generations_section(c)
             + render_libraries(c) + not_stubbed_section(c))
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------

def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def differences(generated: str, checked_in_path: str) -> list[str]:
    try:
        checked_in = read_text(checked_in_path)
    except FileNotFoundError:
        return [f"{checked_in_path} does not exist"]
    if checked_in == generated:
        return []
    return list(difflib.unified_diff(checked_in.splitlines(), generated.splitlines(),
                                     DOC + " (checked in)", DOC + " (generated)", lineterm="", n=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--client-library", required=True, help="the built libtally_client.so")
    ap.add_argument("--cuda-include", required=True, help="directory holding cuda.h etc.")
    ap.add_argument("--cudnn-include", help="directory holding cudnn_graph.h etc. (default: --cuda-include)")
    ap.add_argument("--nm", default="nm", help="nm of the toolchain that linked the library")
    ap.add_argument("--out", required=True, help="where to write the Markdown")
    ap.add_argument("--check", metavar="CHECKED_IN", help="fail unless CHECKED_IN equals the output")
    args = ap.parse_args(argv)
    try:
        exports = read_exports(args.client_library, args.nm)
        text = render(build(args.cuda_include, args.cudnn_include or args.cuda_include, exports))
    except (CompatibilityError, cuda_stubs.GenError) as e:
        print(f"gen_compatibility.py: error: {e}", file=sys.stderr)
        return 1
    write(args.out, text)
    if args.check:
        diff = differences(text, args.check)
        if diff:
            shown = diff[:80] + ([f"... ({len(diff) - 80} more diff lines)"] if len(diff) > 80 else [])
            print("\n".join(shown), file=sys.stderr)
            print(f"\n{DOC} does not match what the client library and headers give ({args.out}).\n"
                  f"Regenerate it with: {REGENERATE}\nand commit the result.", file=sys.stderr)
            return 1
        print(f"{DOC} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
