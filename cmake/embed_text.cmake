# Text files compiled into the server as `extern const char NAME[]`.
#
# Included: throwbox_embed_text(OUT IN NAMESPACE NAME) adds a build step
# writing OUT (a .cpp holding IN's bytes as a raw string literal) from IN.
# Run as a script (cmake -DIN= -DOUT= -DNAMESPACE= -DNAME= -P embed_text.cmake):
# writes OUT (IN must not contain the literal's delimiter).
if(CMAKE_SCRIPT_MODE_FILE)
  file(READ "${IN}" text)
  string(FIND "${text}" ")embedded\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${IN} contains the raw string's delimiter )embedded\"")
  endif()
  get_filename_component(source "${IN}" NAME)
  file(WRITE "${OUT}.tmp"
    "// Generated from ${source} by cmake/embed_text.cmake; do not edit.\n"
    "namespace ${NAMESPACE} {\n"
    "extern const char ${NAME}[];\n"
    "const char ${NAME}[] = R\"embedded(${text})embedded\";\n"
    "}  // namespace ${NAMESPACE}\n")
  file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
  file(REMOVE "${OUT}.tmp")
  return()
endif()

set(THROWBOX_EMBED_TEXT_SCRIPT ${CMAKE_CURRENT_LIST_FILE})
function(throwbox_embed_text out in namespace name)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DIN=${in} -DOUT=${out} -DNAMESPACE=${namespace} -DNAME=${name}
            -P ${THROWBOX_EMBED_TEXT_SCRIPT}
    DEPENDS ${in} ${THROWBOX_EMBED_TEXT_SCRIPT}
    COMMENT "Embedding the text of ${name}"
    VERBATIM)
endfunction()
