# cmake -DIN=file -DOUT=file.cpp -DNAMESPACE=ns -DNAME=symbol -P embed_text.cmake
# Writes OUT: `extern const char NAME[]` in NAMESPACE holding IN's bytes, as a
# raw string literal (IN must not contain its delimiter).
file(READ "${IN}" text)
string(FIND "${text}" ")embedded\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw string's delimiter )embedded\"")
endif()
file(WRITE "${OUT}.tmp"
  "// Generated from ${IN} by cmake/embed_text.cmake; do not edit.\n"
  "namespace ${NAMESPACE} {\n"
  "extern const char ${NAME}[];\n"
  "const char ${NAME}[] = R\"embedded(${text})embedded\";\n"
  "}  // namespace ${NAMESPACE}\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
