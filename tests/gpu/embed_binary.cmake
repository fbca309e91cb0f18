# Usage: cmake -DINPUT=<file> -DOUTPUT=<header.h> -DVAR=<identifier> -P embed_binary.cmake
# Wraps a binary image (a fatbin, a cubin) into an 8-byte aligned C++ byte array, as the
# driver wants a loaded image aligned.
file(READ "${INPUT}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by embed_binary.cmake. Do not edit.\n"
  "#pragma once\n"
  "alignas(8) static const unsigned char ${VAR}[] = {${bytes}};\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
