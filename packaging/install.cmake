# `cmake --install` and the Debian package (CPack). Installed layout, for
# CMAKE_INSTALL_PREFIX=/usr (the package):
#   /usr/bin/throwbox                          the server
#   /usr/libexec/throwbox/throwbox-runner      the per-job runner (found from the server's own path)
#   /usr/libexec/throwbox/throwbox-parser      the parser helper (beside the runner)
#   /usr/share/throwbox/policies/*.json        the bundled policies
#   /etc/throwbox/policy.json                  the policy the server reads first (a conffile)
#   /lib/systemd/system/throwbox.service       the HTTP service (not enabled by the package)
#   /etc/apparmor.d/throwbox                   the AppArmor profile of server and runner
#   /usr/share/man/man1/throwbox.1.gz          from the binary's --help texts (help2man)
#   /usr/share/doc/throwbox/                   README, docs, examples, copyright, changelog
# Another prefix (/usr/local, /opt/throwbox) keeps the same shape below it;
# the policy in /etc and the AppArmor profile are then the administrator's to
# place (the server reads <prefix>/share/throwbox/policies/default.json).
include(GNUInstallDirs)

set(THROWBOX_PKG_DIR ${CMAKE_CURRENT_BINARY_DIR}/packaging)
file(MAKE_DIRECTORY ${THROWBOX_PKG_DIR})
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(THROWBOX_SYSTEMD_DIR /lib/systemd/system)
  set(THROWBOX_ETC_DIR /etc)
else()
  set(THROWBOX_SYSTEMD_DIR ${CMAKE_INSTALL_PREFIX}/lib/systemd/system)
  set(THROWBOX_ETC_DIR ${CMAKE_INSTALL_FULL_SYSCONFDIR})
endif()
set(THROWBOX_BINDIR ${CMAKE_INSTALL_FULL_BINDIR})
set(THROWBOX_RUNNER ${CMAKE_INSTALL_FULL_LIBEXECDIR}/throwbox/throwbox-runner)
set(THROWBOX_PARSER ${CMAKE_INSTALL_FULL_LIBEXECDIR}/throwbox/throwbox-parser)
configure_file(packaging/throwbox.service.in ${THROWBOX_PKG_DIR}/throwbox.service @ONLY)
configure_file(packaging/apparmor/throwbox.in ${THROWBOX_PKG_DIR}/apparmor-throwbox @ONLY)

install(TARGETS throwbox RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS throwbox-runner throwbox-parser RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/throwbox)
# A template's interpreter loads it (pool.templates): found beside the runner.
install(TARGETS throwbox-template LIBRARY DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/throwbox)
install(FILES policies/default.json policies/data.json policies/strict.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/throwbox/policies)
install(FILES policies/default.json DESTINATION ${THROWBOX_ETC_DIR}/throwbox RENAME policy.json)
install(FILES ${THROWBOX_PKG_DIR}/throwbox.service DESTINATION ${THROWBOX_SYSTEMD_DIR})
install(FILES ${THROWBOX_PKG_DIR}/apparmor-throwbox DESTINATION ${THROWBOX_ETC_DIR}/apparmor.d RENAME throwbox)
install(FILES packaging/debian/lintian-overrides DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides
        RENAME throwbox)

# Documentation, compressed as Debian policy wants (12.3), and the man page.
find_program(HELP2MAN help2man)
find_program(GZIP gzip REQUIRED)
set(THROWBOX_DOCS README.md docs/architecture.md docs/boundary.md docs/http.md docs/operations.md docs/performance.md docs/policy.md docs/testing.md docs/tools.md docs/troubleshooting.md)
set(THROWBOX_DOC_OUTPUTS)
foreach(doc ${THROWBOX_DOCS})
  get_filename_component(name ${doc} NAME)
  add_custom_command(OUTPUT ${THROWBOX_PKG_DIR}/${name}.gz
    COMMAND ${GZIP} -9nc ${CMAKE_CURRENT_SOURCE_DIR}/${doc} > ${THROWBOX_PKG_DIR}/${name}.gz
    DEPENDS ${doc} VERBATIM)
  list(APPEND THROWBOX_DOC_OUTPUTS ${THROWBOX_PKG_DIR}/${name}.gz)
endforeach()
add_custom_command(OUTPUT ${THROWBOX_PKG_DIR}/changelog.gz
  COMMAND ${GZIP} -9nc ${CMAKE_CURRENT_SOURCE_DIR}/packaging/debian/changelog > ${THROWBOX_PKG_DIR}/changelog.gz
  DEPENDS packaging/debian/changelog VERBATIM)
list(APPEND THROWBOX_DOC_OUTPUTS ${THROWBOX_PKG_DIR}/changelog.gz)
if(HELP2MAN)
  add_custom_command(OUTPUT ${THROWBOX_PKG_DIR}/throwbox.1.gz
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/packaging/manpage.sh $<TARGET_FILE:throwbox> ${THROWBOX_PKG_DIR}/throwbox.1
    COMMAND ${GZIP} -9nf ${THROWBOX_PKG_DIR}/throwbox.1
    DEPENDS throwbox packaging/manpage.sh VERBATIM)
  list(APPEND THROWBOX_DOC_OUTPUTS ${THROWBOX_PKG_DIR}/throwbox.1.gz)
  install(FILES ${THROWBOX_PKG_DIR}/throwbox.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(STATUS "help2man not found: no man page (apt-get install help2man)")
endif()
add_custom_target(throwbox_docs ALL DEPENDS ${THROWBOX_DOC_OUTPUTS})
foreach(doc ${THROWBOX_DOCS})
  get_filename_component(name ${doc} NAME)
  install(FILES ${THROWBOX_PKG_DIR}/${name}.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
endforeach()
install(FILES ${THROWBOX_PKG_DIR}/changelog.gz packaging/debian/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# The Debian package: `cpack -G DEB` in the build directory (configured with
# -DCMAKE_INSTALL_PREFIX=/usr). Depends come from the libraries the binaries
# link (dpkg-shlibdeps), plus adduser for the service user.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME throwbox)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "throwbox maintainers <throwbox@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "MCP tool server running model-written code in disposable sandboxes")
# The long description (cpack writes the summary line above it itself).
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "throwbox gives a model host (an MCP client) five tools: upload_input,
run_code, fetch_artifact, open_workspace and close_workspace. Each run_code
call runs in a fresh Linux process sandbox (user, pid, mount, net, ipc and
uts namespaces, seccomp, Landlock, cgroups, rlimits) with no network and no
host secrets, and the files it writes pass an artifact gate before a
reference goes back.

It serves MCP over stdio for desktop clients, or over Streamable HTTP for
shared deployments (static tokens or OAuth 2.1 access tokens). The package
installs the server, its sandbox runner, the bundled policies, a systemd
unit for the HTTP mode (not enabled) with its own system user, and an
AppArmor profile.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/throwbox/throwbox")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "nodejs, python3-numpy, python3-pandas, python3-matplotlib, apparmor")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${CMAKE_CURRENT_SOURCE_DIR}/packaging/debian/postinst
  ${CMAKE_CURRENT_SOURCE_DIR}/packaging/debian/prerm
  ${CMAKE_CURRENT_SOURCE_DIR}/packaging/debian/postrm
  ${CMAKE_CURRENT_SOURCE_DIR}/packaging/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
set(CPACK_STRIP_FILES TRUE)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
include(CPack)
