# Usage: cmake -DINPUT=<file.ptx> -DOUTPUT=<header.h> -DVAR=<identifier> -P embed_ptx.cmake
# Wraps the PTX text into a C++ raw string literal.
file(READ "${INPUT}" content)
string(FIND "${content}" ")TALLY_PTX\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "PTX text contains the raw-string delimiter")
endif()
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by embed_ptx.cmake. Do not edit.\n"
  "#pragma once\n"
  "static const char ${VAR}[] = R\"TALLY_PTX(${content})TALLY_PTX\";\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
